"""Runs the vmem-lsp that the .vsix bundles, in the Python the extension found (the project's):

    python launch.py serve          the language server (the extension's command)
    python launch.py doctor         any other vmem-lsp command, e.g. the doctor
    python launch.py --check        prints {"python": ..., "vmem_lsp": ...} once vmem_lsp, pygls
                                    and libcst (its native module) import; exit 3 and a message
                                    on stderr when they cannot in this Python

bundled/libs/vmem holds vmem_lsp, bundled/libs/cpXY the server's dependencies for CPython X.Y
(scripts/bundle_python.sh). Both go first on sys.path, ahead of the environment's packages, so
that an older pygls or libcst of the project cannot break the server. Children (the compile
worker `python -m vmem_lsp worker`) inherit a PYTHONPATH with bundled/libs/vmem alone: they
find vmem_lsp, and the project's code they import sees its own packages, not the bundle's.

Written for any Python, old ones included: it must be able to say that it needs 3.11 (hence
%-formatting, no f-strings, and the version check ruff finds outdated).
"""
# ruff: noqa: UP031, UP036

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LIBS = os.path.join(os.path.dirname(HERE), "libs")
NOT_RUNNABLE = 3


def fail(message):
    sys.stderr.write("vmem-lsp (bundled): " + message + "\n")
    sys.exit(NOT_RUNNABLE)


def main():
    version = "%d.%d" % sys.version_info[:2]
    if sys.version_info < (3, 11):
        fail("needs Python 3.11 or newer; %s is Python %s" % (sys.executable, version))
    tag = "cp%d%d" % sys.version_info[:2]
    deps = os.path.join(LIBS, tag)
    vmem = os.path.join(LIBS, "vmem")
    if not os.path.isdir(os.path.join(vmem, "vmem_lsp")):
        fail("this build of the extension bundles no vmem_lsp (%s is missing: run scripts/bundle_python.sh)" % vmem)
    if sys.implementation.name != "cpython" or not os.path.isdir(deps):
        have = sorted(n for n in os.listdir(LIBS) if n.startswith("cp"))
        fail(
            "bundles its libraries for CPython %s only; %s is %s %s"
            % (", ".join("%s.%s" % (n[2], n[3:]) for n in have), sys.executable, sys.implementation.name, version)
        )
    if sys.path and os.path.abspath(sys.path[0] or ".") == HERE:
        del sys.path[0]
    sys.path[0:0] = [vmem, deps]
    inherited = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = vmem + (os.pathsep + inherited if inherited else "")

    args = sys.argv[1:]
    if args == ["--check"]:
        try:
            import json

            import libcst
            import libcst.native  # noqa: F401  (the compiled parser: the part that is per Python version)
            import lsprotocol  # noqa: F401
            import pygls  # noqa: F401

            import vmem_lsp
        except Exception as error:
            fail("the bundled libraries do not load in %s (Python %s): %r" % (sys.executable, version, error))
        print(
            json.dumps(
                {
                    "python": "%d.%d.%d" % sys.version_info[:3],
                    "executable": sys.executable,
                    "vmem_lsp": getattr(vmem_lsp, "__version__", "?"),
                }
            )
        )
        return 0
    from vmem_lsp.cli import main as vmem_lsp_main

    sys.argv[0] = "vmem-lsp"
    return vmem_lsp_main(args)


if __name__ == "__main__":
    sys.exit(main())
