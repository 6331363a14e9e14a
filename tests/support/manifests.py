"""`mgpu-tf k8s` run in-process, and its manifests checked against the Kubernetes schemas
(kubernetes-validate, offline) and JobSet's vendored CRD schema (tests/data)."""

import functools
import json
import pathlib

import jsonschema
import kubernetes_validate
import pytest
import yaml

from mgpu_tf.cli import main as cli_main

VERSIONS = ("1.25", kubernetes_validate.latest_version())
TRAIN = ["python", "-m", "mgpu_tf.train", "--strategy=multi_worker"]
JOBSET_SCHEMA = pathlib.Path(__file__).resolve().parent.parent / "data" / (
    "jobset_v1alpha2_schema.json")


def k8s(capsys, *args):
    """`mgpu-tf k8s ARGS`: its exit code, standard output and standard error."""
    code = cli_main(["k8s", *args])
    out, err = capsys.readouterr()
    return code, out, err


def manifests(capsys, *args, command=TRAIN):
    """The documents `mgpu-tf k8s ARGS -- COMMAND` prints; it must succeed."""
    code, out, err = k8s(capsys, *args, "--", *command)
    assert code == 0, err
    return list(yaml.safe_load_all(out))


def validate(document):
    """Fails the test unless `document` is valid Kubernetes in every one of `VERSIONS`."""
    for version in VERSIONS:
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{document['kind']} is not valid Kubernetes {version}: "
                        f"{error.message} at {list(error.path)}")


def strict(schema):
    """The schema with unknown fields refused, as kubernetes-validate's strict mode does
    (the API server would drop them silently, hiding a misspelt field)."""
    if isinstance(schema, dict):
        schema = {key: strict(value) for key, value in schema.items()}
        if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema.setdefault("additionalProperties", False)
    elif isinstance(schema, list):
        schema = [strict(item) for item in schema]
    return schema


@functools.cache
def jobset_validator():
    schema = strict(json.loads(JOBSET_SCHEMA.read_text()))
    # A CRD schema is OpenAPI 3.0's subset of JSON Schema draft 4.
    return jsonschema.Draft4Validator(schema)


def validate_jobset(jobset):
    """The JobSet against its CRD schema, and each Job it embeds against Kubernetes'."""
    errors = [f"{e.message} at {list(e.absolute_path)}"
              for e in jobset_validator().iter_errors(jobset)]
    assert not errors, errors
    for replicated in jobset["spec"]["replicatedJobs"]:
        # Each replicated Job embeds a batch/v1 JobTemplateSpec: validate it as a Job.
        validate({"apiVersion": "batch/v1", "kind": "Job",
                  "metadata": {"name": f"{jobset['metadata']['name']}-{replicated['name']}-0"},
                  **replicated["template"]})
