"""The `schema` identifiers of plan and addendum documents (data/plan_validation.py, docs/plans.md).

A module of their own, free of imports, so that `campaign plan --help` can name them without
loading the plan machinery (jsonschema, the store)."""

PLAN_SCHEMA_ID = "omni-campaign-plan/1"
ADDENDUM_SCHEMA_ID = "omni-campaign-addendum/1"
