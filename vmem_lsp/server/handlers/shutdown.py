"""shutdown: stop the worker and the background threads, leaving no process behind."""


def handle(ls, params) -> None:
    ls.stop_background()
