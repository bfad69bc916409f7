"""The fault suite (issue 12): no fault loses or duplicates a kernel. docs/reliability.md has the table."""
