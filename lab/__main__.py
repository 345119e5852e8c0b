import sys

# jsonschema (imported by nbformat) builds about 35 Earley parsers at import when the optional
# rfc3987-syntax is installed, to check the "iri" format that no notebook schema uses: 1.5 s
# of every `python -m lab` process, each sweep worker included (python-jsonschema/jsonschema
# issue 1428). Without it jsonschema leaves that one format unchecked. Only this command's
# process is affected, never a kernel or a user's own import of jsonschema.
sys.modules.setdefault("rfc3987_syntax", None)

from lab.cli import main  # noqa: E402

sys.exit(main())
