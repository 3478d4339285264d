"""The trial: its spec (``spec``), the rules that refuse one (``rules``), track layouts (``layout``), triage, teams
and quotas (``governance``), the budget check, the stored record, the instance catalogue and the job targets."""
