"""Which compile-cache entries a caller may see: a team's are those its trials resolved or used; an admin sees all.

An entry carries no team: its key is computed from the model, the layout and the compiler, so two teams training the
same model share it. It names the trials that used it (``observed``: ``<trial>#<run>#a<attempt>``, ``hit_trials``),
and a trial item names the entry it resolved (``cache_key``); the trials table names each trial's team. Entries no
trial of the team touched (their components name other teams' weights) stay hidden from it.
"""

from __future__ import annotations

from lambdas.domain.cache.cache_entries import RegistryEntry
from lambdas.domain.trial.governance import Caller, NotPermitted
from lambdas.services.ports import CacheRegistry, Trials


def used_by(entry: RegistryEntry) -> set[str]:
    """The trial ids an entry's recorded uses name."""
    return {o.split("#", 1)[0] for o in entry.observed} | set(entry.hit_trials)


def visible_entries(caller: Caller, *, registry: CacheRegistry, trials: Trials) -> list[RegistryEntry]:
    """The registry's entries ``caller`` may read. Raises ``NotPermitted`` for a principal in no team."""
    if caller.admin:
        return list(registry.iter_all())
    if caller.team is None:
        raise NotPermitted(f"principal {caller.principal} is a member of no team on this stage; ask a platform admin "
                           "to add it to governance.teams.<team>.members (or a member_roles pattern)", role="team")
    ids: set[str] = set()
    keys: set[str] = set()
    for trial in trials.of_team(caller.team):
        ids.add(trial.trial_id)
        if trial.cache_key:
            keys.add(trial.cache_key)
    return [e for e in registry.iter_all() if e.cache_key in keys or used_by(e) & ids]
