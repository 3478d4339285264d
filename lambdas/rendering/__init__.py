"""Markdown and HTML renderings of the typed report model (``lambdas.domain.report.model``), with its templates."""
