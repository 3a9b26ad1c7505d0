"""An example whose Python never returns and never sleeps: a core at 100%
until something kills it. Touches $VMEM_SPIN_MARK first, so a test knows the
worker is inside user code."""
import os

# vmem: spin(f32[8, 128])


def spin(x):
    mark = os.environ.get("VMEM_SPIN_MARK")
    if mark:
        open(mark, "w").close()
    n = 0
    while True:
        n += 1
