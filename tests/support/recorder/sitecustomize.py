"""Records the private names each process reaches when `RECORD_PRIVATE_NAMES` names a directory.

Python imports `sitecustomize` at start-up; this folder is on PYTHONPATH only in the
release matrix's runs (noxfile.py). See support/private_names.py.
"""

import os

if os.environ.get("RECORD_PRIVATE_NAMES"):
    from support import private_names

    private_names.install(os.environ["RECORD_PRIVATE_NAMES"])
