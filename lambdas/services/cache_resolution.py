"""Resolving a trial's compile-cache entry before the Trn2 track, and collecting entries nobody uses."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from lambdas.domain.cache.cache_entries import ENTRY_MARKER, EntryRejected, RegistryEntry, check_entry, compile_writer
from lambdas.domain.cache.compile_cache import cache_key, cache_url
from lambdas.domain.vocabulary import COMPILE_RUN, TRIAL_ACTIVE
from lambdas.services.cache_retention import expired_entries
from lambdas.services.clock import now_iso
from lambdas.services.frozen_specs import load_spec
from lambdas.services.ports import CacheRegistry, Objects, Trials


@dataclass(frozen=True)
class Resolution:
    """A trial's compile-cache entry as the workflow's Trn2 branch takes it."""

    cache_url: str
    cache_key: str
    prefix: str
    warm: bool
    failed_before: bool
    retry_requested: bool
    writer: str | None  # the run sent to build the entry (none when it is warm)
    rejected: str | None  # why an entry that looked warm is not served


@dataclass(frozen=True)
class Collected:
    """What one garbage collection found (and, unless a dry run, deleted)."""

    expired: list[str]
    deleted_objects: int
    dry_run: bool
    retention_days: int
    protected: list[str]  # keys an active trial uses


class CompileCaches:
    """The compile-cache registry as the workflow uses it: resolve a trial's entry before its Trn2 track, and collect
    entries nobody has used for the retention period."""

    def __init__(self, *, trials: Trials, registry: CacheRegistry, artifacts: Objects, cache_objects: Objects,
                 cache_bucket: str, image_versions: dict[str, str] | None = None) -> None:
        self.trials, self.registry, self.artifacts, self.cache_objects = trials, registry, artifacts, cache_objects
        self.cache_bucket = cache_bucket
        self.image_versions = dict(image_versions or {})  # the Trainium2 image's: the key carries its compiler

    def resolve(self, trial_id: str, spec_uri: str, *, retry_failed: bool = False) -> Resolution:
        spec = load_spec(self.artifacts, spec_uri)
        if spec.trial_id != trial_id:
            raise ValueError(f"spec at {spec_uri} is trial {spec.trial_id}, not {trial_id}")
        key = cache_key(spec, self.image_versions)
        at = now_iso()
        self.registry.ensure(key.key, prefix=key.prefix, model_slug=key.model_slug,
                             compiler_version=key.compiler_version, components=key.components, at=at)
        self.registry.touch(key.key, at)
        entry = self.registry.get(key.key) or RegistryEntry(cache_key=key.key)
        failed_before = entry.status in ("failed", "retry_requested")
        if retry_failed and entry.status == "failed":
            self.registry.request_retry(key.key)
        warm = entry.status == "ready" and (len(entry.objects) > 0 or entry.hits > 0 or entry.misses > 0)
        rejected = self.entry_problem(key.prefix) if warm else None
        if rejected is not None:
            # Not served: the workflow builds it again (the warm-up stage, or the training run), and the rebuilding
            # run's miss makes it ready once more.
            self.registry.reject(key.key, rejected, at)
            warm = False
        trial = self.trials.get(trial_id)
        writer = compile_writer(warm, trial is not None and COMPILE_RUN in trial.queues)
        if trial is not None:
            # What the trial's runs may speak for (cache_observation) and write (job_credentials); no run writes a
            # warm entry.
            self.trials.update(trial_id, cache_key=key.key, cache_prefix=key.prefix, cache_writer=writer)
        return Resolution(cache_url=cache_url(self.cache_bucket, key), cache_key=key.key, prefix=key.prefix, warm=warm,
                          failed_before=failed_before, retry_requested=retry_failed and failed_before, writer=writer,
                          rejected=rejected)

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

    def collect_garbage(self, *, retention_days: int, dry_run: bool, now: datetime | None = None) -> Collected:
        active = {t.cache_key for t in self.trials.iter_all() if t.cache_key and t.status in TRIAL_ACTIVE}
        expired = expired_entries(self.registry.iter_all(), now=now or datetime.now(UTC),
                                  retention_days=retention_days, active_keys=active)
        deleted_objects = 0
        if not dry_run:
            for key in expired:
                entry = self.registry.get(key)
                prefix = entry.prefix if entry is not None else None
                if prefix:
                    for object_key in self.cache_objects.list_keys(prefix):
                        self.cache_objects.delete_key(object_key)
                        deleted_objects += 1
                self.registry.delete(key)
        return Collected(expired=expired, deleted_objects=deleted_objects, dry_run=dry_run,
                         retention_days=retention_days, protected=sorted(active))
