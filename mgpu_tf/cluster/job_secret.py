"""The per-job secret the workers prove they know before the tcp ring lets them in.

The launcher makes one per job; on Kubernetes it comes from a Secret (`mgpu-tf k8s`); it can
also be given in `MGPU_TF_JOB_SECRET`.

Design: docs/deployment.md#closed-ports
"""

import secrets

from mgpu_tf.cluster import detect

__all__ = ["SECRET_VARIABLE", "MIN_SECRET_CHARACTERS", "new_secret", "job_secret"]

SECRET_VARIABLE = "MGPU_TF_JOB_SECRET"
MIN_SECRET_CHARACTERS = 16


def new_secret():
    """A fresh secret: 32 random bytes, as 64 hex characters."""
    return secrets.token_hex(32)


def job_secret():
    """The job's secret as bytes, from `MGPU_TF_JOB_SECRET`, or `None` when it is not set.

    Raises:
        ValueError: for a secret shorter than 16 characters.
    """
    text = detect.environ_value(SECRET_VARIABLE, "")
    if not text:
        return None
    if len(text) < MIN_SECRET_CHARACTERS:
        raise ValueError(
            f"{SECRET_VARIABLE} must hold at least {MIN_SECRET_CHARACTERS} characters. "
            f"Received: {len(text)} characters. Use e.g. the output of "
            "python -c 'import secrets; print(secrets.token_hex(32))'.")
    return text.encode()
