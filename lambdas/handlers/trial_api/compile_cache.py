"""/compile-cache: entries by model and compiler version, with hit rates."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from lambdas.handlers.trial_api.models import CacheEntry, CompileCacheView
from lambdas.handlers.trial_api.trials import COMMON
from lambdas.services.cache_retention import entry_view, group_stats

router = Router()


@router.get("/", summary="Compile-cache entries by model and compiler version, with hit rates",
            responses={200: {"description": "entries and per-model statistics"}, **COMMON})
def compile_cache(
    model: Annotated[str | None, Query(max_length=200)] = None,
    compiler_version: Annotated[str | None, Query(max_length=64)] = None,
) -> CompileCacheView:
    items = [
        e
        for e in router.context["api"].registry.iter_all()
        if (model is None or e.get("model_slug") == model)
        and (compiler_version is None or e.get("compiler_version") == compiler_version)
    ]
    entries = sorted((entry_view(e) for e in items), key=lambda v: (str(v["model"]), v["cache_key"]))
    return CompileCacheView(entries=[CacheEntry.model_validate(e) for e in entries], groups=group_stats(items))
