"""/compile-cache: entries by model and compiler version, with hit rates: the caller's team's (those its trials
resolved or used), every entry for a platform admin."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from lambdas.handlers.trial_api.models import CacheEntry, CompileCacheView
from lambdas.handlers.trial_api.trials import COMMON, _error, caller
from lambdas.services.cache_retention import entry_view, group_stats
from lambdas.services.compile_cache_view import visible_entries

router = Router()


@router.get("/", summary="Compile-cache entries of the caller's team's trials (every entry for a platform admin), "
            "by model and compiler version, with hit rates",
            responses={200: {"description": "entries and per-model statistics"}, **COMMON,
                       403: _error("the caller's principal is in no team")})
def compile_cache(
    model: Annotated[str | None, Query(max_length=200)] = None,
    compiler_version: Annotated[str | None, Query(max_length=64)] = None,
) -> CompileCacheView:
    app = router.context["api"]
    items = [
        e
        for e in visible_entries(caller(), registry=app.registry, trials=app.trials)
        if (model is None or e.model_slug == model)
        and (compiler_version is None or e.compiler_version == compiler_version)
    ]
    entries = sorted((entry_view(e) for e in items), key=lambda v: (str(v.model), v.cache_key))
    return CompileCacheView(entries=[CacheEntry.model_validate(e.model_dump()) for e in entries],
                            groups=[g.model_dump() for g in group_stats(items)])
