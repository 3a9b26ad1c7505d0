"""The environment a worker in the project's interpreter starts with: never this
environment's libtpu (importing libtpu here sets TPU_LIBRARY_PATH, which a child
running another jax would load). Fast: builds commands and dicts, starts nothing."""

import os
import sys

from vmem_lsp.compile.interpreter import Interpreter, worker_command, worker_environment

OURS = os.path.join(sys.prefix, "lib", "libtpu", "libtpu.so")


def test_a_foreign_worker_does_not_inherit_our_libtpu():
    command = worker_command(Interpreter("/project/.venv/bin/python", "VIRTUAL_ENV"))
    env = worker_environment(command, {"TPU_LIBRARY_PATH": OURS, "HOME": "/root"})
    assert env == {"HOME": "/root"}


def test_a_libtpu_the_user_chose_and_our_own_worker_keep_it():
    foreign = worker_command(Interpreter("/project/.venv/bin/python", "VIRTUAL_ENV"))
    chosen = {"TPU_LIBRARY_PATH": "/opt/libtpu/libtpu.so"}
    assert worker_environment(foreign, chosen) == chosen
    own = worker_command(Interpreter(sys.executable, "vmem-lsp's own"))
    assert worker_environment(own, {"TPU_LIBRARY_PATH": OURS}) == {"TPU_LIBRARY_PATH": OURS}
