"""The recipes of docs/deployment.md, run as written (Kubernetes: validated).

A recipe is the fenced block after a `<!-- recipe: NAME -->` line. Commands run
on this machine: `python` is this interpreter, and host names become loopback
addresses (replaced in the command, or mapped by MGPU_TF_HOST_OVERRIDE).
"""

import pathlib
import re
import shlex
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

from mgpu_tf.cli import main as cli_main
from mgpu_tf.cluster import launcher
from support import main_job
from support import workers

_DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "deployment.md"


def _recipe(name):
    text = _DOC.read_text()
    match = re.search(rf"<!-- recipe: {name} -->\n```\w*\n(.*?)```", text, re.DOTALL)
    assert match, f"docs/deployment.md has no recipe {name!r}"
    return match.group(1)


def _commands(name):
    return [line for line in _recipe(name).splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def _python(argv):
    assert argv[0] == "python", argv
    return [sys.executable, *argv[1:]]


def test_every_recipe_is_tested():
    names = re.findall(r"<!-- recipe: ([\w-]+) -->", _DOC.read_text())
    assert sorted(names) == sorted(["gpu-server", "cluster-by-hand", "slurm", "kubernetes",
                                    "kubernetes-pools", "calibrate"])


def test_gpu_server_recipe():
    (command,) = _commands("gpu-server")
    result = subprocess.run(_python(shlex.split(command)), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    main_job.assert_trained_alike([(0, result.stdout)], "processes", strategy="mirrored",
                                  replicas=1)


@pytest.mark.multiworker
def test_cluster_by_hand_recipe():
    commands = _commands("cluster-by-hand")
    assert len(commands) == 2
    ports = launcher.free_ports(2)
    local = [command.replace("node1:2222", f"127.0.0.1:{ports[0]}")
             .replace("node2:2222", f"127.0.0.1:{ports[1]}") for command in commands]
    assert all("node" not in command for command in local)
    argvs = [_python(shlex.split(command)) for command in local]
    main_job.assert_trained_alike(workers.run_together(argvs, [{}, {}]), "workers")


@pytest.mark.multiworker
def test_slurm_recipe():
    script = _recipe("slurm")
    nodes = int(re.search(r"^#SBATCH --nodes=(\d+)$", script, re.MULTILINE).group(1))
    per_node = int(re.search(r"^#SBATCH --ntasks-per-node=(\d+)$", script,
                             re.MULTILINE).group(1))
    (srun,) = [line for line in _commands("slurm") if line.startswith("srun ")]
    argv = _python(shlex.split(srun)[1:])
    ntasks = nodes * per_node
    ports = launcher.free_ports(nodes)
    names = [f"gpu{n + 1}" for n in range(nodes)]
    environments = []
    for rank in range(ntasks):
        node, local = divmod(rank, per_node)
        # srun's variables for `--nodes=2 --ntasks-per-node=1` on gpu1 and gpu2.
        environments.append({
            "SLURM_JOB_ID": "31337", "SLURM_PROCID": str(rank), "SLURM_NTASKS": str(ntasks),
            "SLURM_STEP_NUM_TASKS": str(ntasks), "SLURM_JOB_NODELIST": f"gpu[1-{nodes}]",
            "SLURM_STEP_NODELIST": f"gpu[1-{nodes}]", "SLURM_NODEID": str(node),
            "SLURM_LOCALID": str(local), "SLURM_STEP_TASKS_PER_NODE": f"{per_node}(x{nodes})",
            "SLURM_TASKS_PER_NODE": f"{per_node}(x{nodes})",
            # Every "node" is this machine: each gets its own port.
            "MGPU_TF_HOST_OVERRIDE": ",".join(
                f"{name}=127.0.0.1:{port}" for name, port in zip(names, ports)),
        })
    main_job.assert_trained_alike(workers.run_with_environments(argv[1:], environments), "tasks",
                                  replicas=ntasks)


def _k8s_argv(command):
    argv = shlex.split(command)
    assert argv[0] == "mgpu-tf" and argv[-2] == ">", argv
    return argv[1:-2]


@pytest.mark.parametrize("name", ["kubernetes", "kubernetes-pools"])
def test_kubernetes_recipes_give_valid_manifests(capsys, name):
    (command,) = [c for c in _commands(name) if c.startswith("mgpu-tf k8s")]
    assert cli_main(_k8s_argv(command)) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    for document in documents:
        kubernetes_validate.validate(document, kubernetes_validate.latest_version(),
                                     strict=True)
    jobs = [d for d in documents if d["kind"] == "Job"]
    env = {e["name"]: e["value"]
           for e in jobs[0]["spec"]["template"]["spec"]["containers"][0]["env"]}
    if name == "kubernetes":
        assert [d["kind"] for d in documents] == ["Service", "Job"]
        assert "kubectl apply -f mnist.yaml" in _commands(name)
    else:
        # The weights the recipe's text promises.
        assert env["MGPU_TF_SHARD_WEIGHTS"] == "2.6,2.6,1,1"
        assert "MGPU_TF_SHARD_WEIGHTS=2.6,2.6,1,1" in _DOC.read_text()


@pytest.mark.multiworker
def test_calibrate_recipe(capsys):
    (command,) = _commands("calibrate")
    argv = shlex.split(command)
    assert argv[:2] == ["mgpu-tf", "calibrate"]
    split = argv.index("--")
    # Other jobs share this machine's cores, so the runs' spread is not checked here, and
    # two runs of each worker will do: test_calibrate.py checks the repeats and the refusal;
    # this checks that the recipe runs as written.
    assert cli_main([*argv[1:split], "--max_spread", "1000", "--repeats", "2",
                     *argv[split:split + 1],
                     *_python(argv[split + 1:])]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert re.search(r"^worker\s+examples/sec\s+spread\s+weight$", out, re.MULTILINE)
    assert re.search(r"^MGPU_TF_SHARD_WEIGHTS=[\d.]+,[\d.]+$", out, re.MULTILINE)
