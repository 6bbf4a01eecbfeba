"""The project's defs folder (``[tool.dg.project] defs_module``): one folder per component.

``shared/defs.yaml`` holds what every pipeline uses (keeper, ClickHouse, Spark); each other
folder is one pipeline (``dg scaffold defs eos_pipeline.KafkaTablesComponent NAME`` adds one).
No Python here: the component types are :mod:`eos_pipeline.components.project`.
"""
