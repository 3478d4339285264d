"""The dualtrack CDK app: stateful, compute and control stacks for one deployment stage."""
