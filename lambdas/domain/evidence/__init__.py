"""What a run proves: its summary, the artifacts the ledger accepts, the statistics over step times and losses,
the team's baseline, and the learning and physics checks that make a run usable evidence."""
