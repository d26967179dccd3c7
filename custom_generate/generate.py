"""RheoSampling for ``transformers``' ``generate``: the folder form of ``rheo.hf_generate``.

    model.generate(**inputs, custom_generate="path/to/this/repository", trust_remote_code=True,
                   drafter="path/to/eagle3_head", do_sample=True, temperature=0.7, max_new_tokens=128)

``transformers`` imports this file and calls its ``generate``; the decoding itself is the
installed ``rheo`` package's (``pip install -e .`` in the repository).
"""

from rheo.hf_generate import generate  # noqa: F401 -- the function transformers looks up here
