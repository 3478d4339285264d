"""Process environment overlays for the local runtime: variables set for a block and put back as they were.

Only the named variables are touched (``unittest.mock.patch.dict`` would clear and refill the whole environment on
exit, which threads reading it meanwhile, such as boto3 resolving its endpoint, could see empty)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager


@contextmanager
def overlay(variables: Mapping[str, str], *, remove: Iterable[str] = ()) -> Iterator[None]:
    removed = tuple(remove)
    saved = {name: os.environ.get(name) for name in (*variables, *removed)}
    os.environ.update({name: str(value) for name, value in variables.items()})
    for name in removed:
        os.environ.pop(name, None)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
