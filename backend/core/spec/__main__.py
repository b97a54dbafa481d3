"""``python -m backend.core.spec``: print the spec's field tables (the README's, and docs')."""

from backend.core.spec.fields import spec_fields_markdown

print(spec_fields_markdown())
