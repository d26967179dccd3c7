"""Rows of a long run name the commit the process started with, not one that landed while it ran."""

from rheo import paths


def test_start_git_sha_keeps_the_first_answer(monkeypatch):
    paths.start_git_sha.cache_clear()
    monkeypatch.setattr(paths, "git_sha", lambda: "aaaa")
    assert paths.start_git_sha() == "aaaa"
    monkeypatch.setattr(paths, "git_sha", lambda: "bbbb")  # a commit lands mid-run
    assert paths.start_git_sha() == "aaaa"
    paths.start_git_sha.cache_clear()
