"""Resolving a trial's compile-cache entry before the Trn2 track, and collecting entries nobody uses."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lambdas.domain.compile_cache import ENTRY_MARKER, EntryRejected, cache_key, cache_url, check_entry, compile_writer
from lambdas.domain.trial import TrialSpec, parse_trial, split_s3_uri
from lambdas.domain.vocabulary import COMPILE_RUN, TRIAL_ACTIVE
from lambdas.services.cache_retention import entry_view, expired_entries
from lambdas.services.ports import CacheRegistry, Objects, Trials


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def load_spec(artifacts: Objects, spec_uri: str) -> TrialSpec:
    _bucket, key = split_s3_uri(spec_uri)
    if artifacts.uri(key) != spec_uri:
        raise ValueError(f"spec_uri {spec_uri!r} is outside the artifacts bucket; pass s3://<artifacts>/{key}")
    body = artifacts.get_json(key)
    if body is None:
        raise LookupError(f"no frozen spec at {spec_uri}; submit the trial through the API first")
    return parse_trial(body)


class CompileCaches:
    """The compile-cache registry as the workflow uses it: resolve a trial's entry before its Trn2 track, and collect
    entries nobody has used for the retention period."""

    def __init__(self, *, trials: Trials, registry: CacheRegistry, artifacts: Objects, cache_objects: Objects,
                 cache_bucket: str, image_versions: dict[str, str] | None = None) -> None:
        self.trials, self.registry, self.artifacts, self.cache_objects = trials, registry, artifacts, cache_objects
        self.cache_bucket = cache_bucket
        self.image_versions = dict(image_versions or {})  # the Trainium2 image's: the key carries its compiler

    def resolve(self, trial_id: str, spec_uri: str, *, retry_failed: bool = False) -> dict[str, Any]:
        spec = load_spec(self.artifacts, spec_uri)
        if spec.trial_id != trial_id:
            raise ValueError(f"spec at {spec_uri} is trial {spec.trial_id}, not {trial_id}")
        key = cache_key(spec, self.image_versions)
        at = now_iso()
        self.registry.ensure(key.key, prefix=key.prefix, model_slug=key.model_slug,
                             compiler_version=key.compiler_version, components=key.components, at=at)
        self.registry.touch(key.key, at)
        entry = self.registry.get(key.key) or {"cache_key": key.key}
        failed_before = entry.get("status") in ("failed", "retry_requested")
        if retry_failed and entry.get("status") == "failed":
            self.registry.request_retry(key.key)
        view = entry_view(entry)
        warm = view["status"] == "ready" and (view["objects"] > 0 or view["hits"] > 0 or view["misses"] > 0)
        rejected = self.entry_problem(key.prefix) if warm else None
        if rejected is not None:
            # Not served: the workflow builds it again (the warm-up stage, or the training run), and the rebuilding
            # run's miss makes it ready once more.
            self.registry.reject(key.key, rejected, at)
            warm = False
        trial = self.trials.get(trial_id)
        writer = compile_writer(warm, COMPILE_RUN in ((trial or {}).get("queues") or {}))
        if trial is not None:
            # What the trial's runs may speak for (cache_observation) and write (job_credentials); no run writes a
            # warm entry.
            self.trials.update(trial_id, cache_key=key.key, cache_prefix=key.prefix, cache_writer=writer)
        return {
            "cache_url": cache_url(self.cache_bucket, key),
            "cache_key": key.key,
            "prefix": key.prefix,
            "warm": warm,
            "failed_before": failed_before,
            "retry_requested": bool(retry_failed and failed_before),
            "writer": writer,
            "rejected": rejected,
        }

    def entry_problem(self, prefix: str) -> str | None:
        """Why the entry under ``prefix`` must not be served (None: its objects are the ones its completion marker
        lists, at their sizes; the job that reads them checks their hashes)."""
        try:
            marker = self.cache_objects.get_json(prefix + ENTRY_MARKER)
            held = {k[len(prefix):]: size for k, size in self.cache_objects.sizes(prefix).items()}
            check_entry(marker, held)
        except EntryRejected as exc:
            return str(exc)
        except ValueError as exc:  # a marker that is not JSON
            return f"the completion marker is not JSON: {exc}"
        return None

    def collect_garbage(self, *, retention_days: int, dry_run: bool, now: datetime | None = None) -> dict[str, Any]:
        active = {str(t["cache_key"]) for t in self.trials.iter_all()
                  if t.get("cache_key") and t.get("status") in TRIAL_ACTIVE}
        expired = expired_entries(self.registry.iter_all(), now=now or datetime.now(UTC),
                                  retention_days=retention_days, active_keys=active)
        deleted_objects = 0
        if not dry_run:
            for key in expired:
                entry = self.registry.get(key) or {}
                prefix = entry.get("prefix")
                if prefix:
                    for object_key in self.cache_objects.list_keys(prefix):
                        self.cache_objects.delete_key(object_key)
                        deleted_objects += 1
                self.registry.delete(key)
        return {"expired": expired, "deleted_objects": deleted_objects, "dry_run": dry_run,
                "retention_days": retention_days, "protected": sorted(active)}
