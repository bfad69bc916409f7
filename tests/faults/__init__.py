"""The fault suite: no fault loses or duplicates a kernel. docs/production.md, "When things go wrong", says what it checks."""
