"""Methods from outside the checkout: plug-in modules the registry imports in every process.

A plug-in is an importable module (or package) that registers one or more methods when imported, as a
built-in method module does (``register(Method(...))``, :mod:`rheo.methods.registry`). Two ways name it:

* the **entry-point group** ``rheo.methods`` of an installed distribution, e.g. in its pyproject.toml::

      [project.entry-points."rheo.methods"]
      topk_copy = "my_verifiers.topk_copy"

  (``module`` or ``module:object``; an object that is a :class:`Method` not yet registered is registered);
* the environment variable ``RHEO_PLUGINS=module[,module...]``, for a module on the Python path that is
  installed nowhere.

:mod:`rheo.methods` loads them once, right after the built-in methods, so every process that can name a
method knows them: ``python -m eval.run``, its joblib and SLURM workers (which import the registry
afresh, with the same environment), ``rheo generate``, the table and figure scripts and the notebook.
A plug-in that fails to import does not stop the process (a reader of rows still reads them): it is
reported once as a warning, and the registry's error for an unknown method name repeats why.

Each method a plug-in registers is remembered with the plug-in's source files (:func:`plugin_files`), so
that the version of the decoding code its rows record (``code_version``, eval.store.code_version) covers
the plug-in's code too. Readers of stored rows look methods up with :func:`find_method` and
:func:`kind_of`, which answer None and :data:`UNKNOWN_KIND` for a method this process does not know.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from importlib import metadata
from pathlib import Path
from typing import Optional

from rheo.methods.registry import _REGISTRY, PLUGIN_ERRORS, Method, register

#: the entry-point group of plug-in methods, and the environment variable that lists plug-in modules
GROUP = "rheo.methods"
ENV = "RHEO_PLUGINS"

#: method name -> (where it was named: "entry point <name>" or ENV, the module that registered it)
_SOURCES: dict[str, tuple[str, str]] = {}
_loaded = False


def load_plugins() -> None:
    """Import every plug-in named by the entry-point group and by ``RHEO_PLUGINS`` (once per process)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for where, module, attr in _named():
        _load_one(where, module, attr)


def _named() -> list[tuple[str, str, Optional[str]]]:
    """(where it was named, module, attribute or None) of every plug-in, entry points first."""
    out: list[tuple[str, str, Optional[str]]] = []
    try:
        points = metadata.entry_points(group=GROUP)
    except Exception as e:  # a broken distribution on the path: report, and go on with RHEO_PLUGINS
        _fail(f"entry points of {GROUP}", GROUP, e)
        points = ()
    for point in sorted(points, key=lambda p: p.name):
        module, _, attr = point.value.partition(":")
        out.append((f"entry point {point.name!r} ({GROUP})", module.strip(), attr.strip() or None))
    for module in os.environ.get(ENV, "").split(","):
        if module.strip():
            out.append((ENV, module.strip(), None))
    return out


def _load_one(where: str, module: str, attr: Optional[str]) -> None:
    before = set(_REGISTRY)
    try:
        loaded = importlib.import_module(module)
        obj = loaded
        for part in attr.split(".") if attr else ():
            obj = getattr(obj, part)
        if isinstance(obj, Method) and _REGISTRY.get(obj.name) is not obj:
            register(obj)
    except Exception as e:  # reported, never fatal (module docstring)
        _fail(where, module, e)
        return
    for name in set(_REGISTRY) - before:
        _SOURCES[name] = (where, module)
    if isinstance(obj, Method):
        _SOURCES.setdefault(obj.name, (where, module))


def _fail(where: str, module: str, error: BaseException) -> None:
    text = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}".rstrip(": ")
    PLUGIN_ERRORS.append(f"plug-in {module!r} ({where}) did not load: {text}")
    warnings.warn(f"rheo: the method plug-in {module!r} ({where}) did not load: {text}", RuntimeWarning, stacklevel=3)


def plugin_methods() -> list[str]:
    """The names of the registered methods that plug-ins registered, in registration order."""
    return [n for n in _REGISTRY if n in _SOURCES]


def plugin_module(name: str) -> Optional[str]:
    """The module of the plug-in that registered method ``name``; None for a method of the checkout."""
    return _SOURCES[name][1] if name in _SOURCES else None


def plugin_files(name: str) -> tuple[Path, ...]:
    """The Python source files of the plug-in that registered method ``name`` (a package: every ``.py``
    under its folder), sorted; () for a method of the checkout."""
    module = sys.modules.get(plugin_module(name) or "")
    source = getattr(module, "__file__", None)
    if not source:
        return ()
    path = Path(source)
    if path.name == "__init__.py":
        return tuple(sorted(p for p in path.parent.rglob("*.py") if p.is_file()))
    return (path,)


# ------------------------------------------------------------------ methods this process does not know
#: the kind readers give a method this process does not know (listed after the registered kinds)
UNKNOWN_KIND = "unknown"


def find_method(name: str) -> Optional[Method]:
    """The registered method ``name``, or None: how readers of stored rows treat a method this process
    does not know (a plug-in not loaded here) - by its raw name - instead of refusing the rows."""
    return _REGISTRY.get(name) if isinstance(name, str) else None


def kind_of(name: str) -> str:
    """The kind of method ``name`` (rheo.methods.registry.KINDS), or :data:`UNKNOWN_KIND` for one not
    registered here."""
    method = find_method(name)
    return method.kind if method is not None else UNKNOWN_KIND

