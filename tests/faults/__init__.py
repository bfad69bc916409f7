"""The fault suite (issue 12): no fault loses or duplicates a kernel. docs/production.md, "When things go wrong", says what it checks."""
