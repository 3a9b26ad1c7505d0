import a_module_that_does_not_exist  # noqa: F401

# vmem: kernel(f32[8, 128])
