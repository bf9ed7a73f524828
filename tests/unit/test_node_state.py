"""Per-user node state (issue 24 item 5): nothing one user can write decides another user's job.

The port registry and the Ray start lock live in ``/tmp/grpokit-<uid>`` (0700, owner checked);
other users' ports are found by binding; a wait for the start slot is told to the caller; Ray's
metrics export is off unless the job asks for it.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time
from pathlib import Path

import pytest

from grpokit.runtime.processes import node_state, ports, ray_cluster

REPO = Path(__file__).resolve().parents[2]
OTHER_USER = "grpokit-test2"


@pytest.fixture
def own_state(tmp_path, monkeypatch) -> Path:
    """A state folder of this test's (``GRPOKIT_STATE_DIR``), registry and lock at their defaults."""
    path = tmp_path / "state"
    monkeypatch.setenv(node_state.ENV, str(path))
    monkeypatch.setattr(ports, "REGISTRY", None)
    monkeypatch.setattr(ray_cluster, "START_LOCK", None)
    return path


def test_the_state_folder_is_created_private_and_holds_registry_and_lock(own_state):
    reserved = ports.reserve_ports(2, host="127.0.0.1")
    try:
        assert stat.S_IMODE(own_state.stat().st_mode) == 0o700 and own_state.stat().st_uid == os.getuid()
        assert ports.registry_path() == own_state / "ports.json"
        assert stat.S_IMODE((own_state / "ports.lock").stat().st_mode) == 0o600
        assert sorted(ports.reserved()[os.getpid()]) == sorted(reserved)
        with ray_cluster.start_slot(5):
            assert stat.S_IMODE((own_state / "ray-start.lock").stat().st_mode) == 0o600
    finally:
        ports.release_ports()


def test_the_default_folder_is_per_user_in_tmp(monkeypatch):
    monkeypatch.delenv(node_state.ENV, raising=False)
    assert node_state.default_dir() == Path(f"/tmp/grpokit-{os.getuid()}")
    assert node_state.default_dir(1234) == Path("/tmp/grpokit-1234")


def test_group_and_other_rights_on_an_own_folder_are_taken_away(own_state):
    own_state.mkdir(mode=0o777)
    own_state.chmod(0o777)
    node_state.state_dir()
    assert stat.S_IMODE(own_state.stat().st_mode) == 0o700


def test_a_symlink_in_place_of_the_folder_is_refused(own_state, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    own_state.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(node_state.NodeStateError, match="is a symlink or not a folder"):
        node_state.state_dir()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another uid needs root")
def test_a_folder_another_user_created_is_refused_with_the_fix(own_state):
    own_state.mkdir(mode=0o700)
    os.chown(own_state, 65534, 65534)  # nobody: created first by someone else
    with pytest.raises(node_state.NodeStateError) as err:
        ports.reserve_ports(1)
    assert str(err.value) == (
        f"the kit's node state folder {own_state} belongs to uid 65534, not to you (uid {os.getuid()}): another "
        "user created it, so it cannot hold your jobs' port registry and locks; fix: remove it (as its owner "
        f"or root), or set {node_state.ENV} to a folder of yours on this node's local disk"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another uid needs root")
def test_a_default_folder_another_user_made_first_gives_the_job_a_private_folder_of_its_own(
    tmp_path, monkeypatch, caplog
):
    """Issue 36 item 4: ``/tmp/grpokit-<uid>`` made first by uid 12345 is not a failure (it was, and
    the job was tried again on the same node 60 s later): the job takes a folder of its own beside it."""
    monkeypatch.delenv(node_state.ENV, raising=False)
    monkeypatch.setattr(node_state, "_CHOSEN", {})
    default = tmp_path / f"grpokit-{os.getuid()}"
    default.mkdir(mode=0o777)
    os.chown(default, 12345, 12345)
    decoy = tmp_path / f"grpokit-{os.getuid()}-0000"  # sorts first, but it is not ours
    decoy.mkdir(mode=0o777)
    os.chown(decoy, 12345, 12345)
    caplog.set_level("WARNING", logger=node_state.__name__)

    chosen = node_state.choose(default)

    st = os.lstat(chosen)
    assert chosen.parent == tmp_path and chosen.name.startswith(f"grpokit-{os.getuid()}-") and chosen != decoy
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700
    assert [r.getMessage() for r in caplog.records] == [
        f"the kit's node state folder {default} belongs to uid 12345, not to you (uid {os.getuid()}): another user "
        f"created it, so it cannot hold your jobs' port registry and locks; this job uses {chosen} instead (private "
        f"to you; your other jobs on this node use it too); removing {default} (as its owner or root) gives the "
        "default back"
    ]
    assert node_state.choose(default) == chosen and len(caplog.records) == 1, "chosen once per process"
    monkeypatch.setattr(node_state, "_CHOSEN", {})  # another job of this user on the node: the same folder
    assert node_state.choose(default) == chosen
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([default.name, decoy.name, chosen.name])
    # what the job does with it: the start slot and the port registry live there, no error
    monkeypatch.setattr(node_state, "default_dir", lambda uid=None: default)
    monkeypatch.setattr(ports, "REGISTRY", None)
    monkeypatch.setattr(ray_cluster, "START_LOCK", None)
    assert ray_cluster.start_lock_path() == chosen / "ray-start.lock"
    try:
        ports.reserve_ports(1, host="127.0.0.1")
        assert (chosen / "ports.json").exists()
    finally:
        ports.release_ports()


def test_a_default_folder_that_is_a_file_also_gives_a_folder_of_its_own(tmp_path, monkeypatch):
    monkeypatch.delenv(node_state.ENV, raising=False)
    monkeypatch.setattr(node_state, "_CHOSEN", {})
    default = tmp_path / "grpokit-7"
    default.write_text("squatted")
    chosen = node_state.choose(default)
    assert chosen.is_dir() and not chosen.is_symlink() and chosen.name.startswith("grpokit-7-")


def test_a_ray_start_refused_for_a_squatted_folder_says_why(own_state):
    own_state.write_text("not a folder")
    with pytest.raises(ray_cluster.RayStartError, match=r"^Ray head did not start on n1: the kit's node state folder"):
        ray_cluster.start_cluster(
            log_dir=own_state.parent,
            env={},
            num_cpus=1,
            num_gpus=0,
            nodes=["n1"],
            multi_node_host=None,
            timeout_s=1,
        )


def test_a_wait_for_the_start_slot_names_the_holder_and_ends(own_state, monkeypatch):
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "77")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    held, release = threading.Event(), threading.Event()

    def hold():
        with ray_cluster.start_slot(30):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    told: list[str | None] = []
    threading.Timer(1.0, release.set).start()
    with ray_cluster.start_slot(30, on_wait=told.append):
        pass
    holder.join()
    assert told == [
        f"waiting for this node's Ray start slot: job 77_3, pid {os.getpid()} starts its Ray; at most 30 s",
        None,
    ]


def test_rays_metrics_export_is_off_unless_the_job_asks():
    assert ray_cluster.metrics_env({"A": "1"}) == {"A": "1", "RAY_enable_metrics_collection": "0"}
    asked = {"RAY_enable_metrics_collection": "1"}
    assert ray_cluster.metrics_env(asked) == asked


# -- two real Unix users on one node ----------------------------------------------------------------

_ROOT_SIDE = r"""
import json, os, pwd, socket, subprocess, sys
opened = []
def record(event, args):  # every file this process opens
    if event == "open" and isinstance(args[0], (str, bytes)):
        opened.append(os.fsdecode(args[0]))
sys.addaudithook(record)
sys.path[:0] = [SRC]
from grpokit.runtime.processes import ports, ray_cluster
other = pwd.getpwnam(USER)
# the old scheme's shared files, left by the first user on the node (root), mode 0644: the case
# fs.protected_regular makes of a 0666 file in sticky /tmp for every other user
for name, text in (("grpokit-ports.json", "{}"), ("grpokit-ports.lock", ""), ("grpokit-ray-start.lock", "")):
    with open(f"/tmp/{name}", "w") as f:
        f.write(text)
    os.chmod(f"/tmp/{name}", 0o644)
# the other user's own state from an earlier job (its folder and files, its registry naming a port)
theirs = f"/tmp/grpokit-{other.pw_uid}"
os.mkdir(theirs, 0o700)
with open(f"{theirs}/ports.json", "w") as f:
    json.dump({"theirs": {"pid": 1, "ports": [ports.LOW]}}, f)
for p in (theirs, f"{theirs}/ports.json"):
    os.chown(p, other.pw_uid, other.pw_gid)
os.chmod(f"{theirs}/ports.json", 0o644)
opened.clear()  # from here on: what the kit opens

# root's job: a reservation, one of its ports listened on, and its Ray start slot held
(port,) = ports.reserve_ports(1, host="127.0.0.1")
listener = socket.socket()
listener.bind(("0.0.0.0", port))
listener.listen()
with ray_cluster.start_slot(60):
    child = subprocess.run(["runuser", "-u", USER, "--", PY2, "-c", CHILD, str(port)],
                           capture_output=True, text=True, timeout=120)
again = ports.reserve_ports(1, host="127.0.0.1")  # root's registry: the other user never touched it
ports.release_ports()
print(json.dumps({"port": port, "rc": child.returncode, "child": child.stdout, "stderr": child.stderr[-3000:],
                  "root_opened_tmp": sorted({p for p in opened if p.startswith("/tmp/")}),
                  "root_state_mode": oct(os.stat(f"/tmp/grpokit-{os.getuid()}").st_mode & 0o777)}))
"""

_USER_SIDE = r"""
import json, os, sys, time
opened = []
def record(event, args):  # every file this process opens
    if event == "open" and isinstance(args[0], (str, bytes)):
        opened.append(os.fsdecode(args[0]))
sys.addaudithook(record)
sys.path[:0] = PATH
from grpokit.runtime.processes import node_state, ports, ray_cluster
port = int(sys.argv[1])
out = {"uid": os.getuid()}
try:
    open("/tmp/grpokit-ports.lock", "a+")  # what the old scheme did: refused
except PermissionError as exc:
    out["old_scheme"] = f"PermissionError: {exc.strerror}"
try:
    open(f"/tmp/grpokit-0/ports.json")
except PermissionError:
    out["root_registry"] = "unreadable"
opened.clear()  # from here on: what the kit opens
ports.LOW, ports.HIGH = port, port + 2  # root's port and the next: root's is taken, seen by binding only
out["got"] = ports.reserve_ports(1, host="127.0.0.1")
t0, told = time.monotonic(), []
with ray_cluster.start_slot(30, on_wait=told.append):  # root holds its own slot meanwhile
    out["slot_wait_s"] = time.monotonic() - t0
out["told"] = told
ports.release_ports()
st = os.stat(node_state.state_dir())
out["state"] = [str(node_state.state_dir()), oct(st.st_mode & 0o777), st.st_uid]
out["opened_tmp"] = sorted({p for p in opened if p.startswith("/tmp/")})
print(json.dumps(out))
"""


def _other_user_python(uid: int) -> tuple[str, list[str]] | None:
    """An interpreter of this Python's minor version that ``uid`` can run, and the sys.path entries
    (this checkout's src, the venv's site-packages) that give it the kit; None when there is none.

    The venv's own interpreter may live under a private home (here /root/.pyenv, /root is 0700);
    the system's python3.X of the same minor version runs the same compiled packages."""
    site = sysconfig.get_paths()["purelib"]
    name = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [sys.executable, f"/usr/bin/{name}", f"/usr/local/bin/{name}", shutil.which(name) or ""]
    for exe in dict.fromkeys(c for c in candidates if c and os.path.exists(c)):
        probe = subprocess.run(
            [
                "runuser",
                "-u",
                OTHER_USER,
                "--",
                exe,
                "-c",
                f"import sys; sys.path[:0] = {[str(REPO / 'src'), site]!r}; "
                "import psutil, grpokit.runtime.processes.ray_cluster",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if probe.returncode == 0:
            return exe, [str(REPO / "src"), site]
    return None


@pytest.fixture(scope="module")
def other_user() -> int:
    """``grpokit-test2``, a real second Unix user (created here when absent: a system user, no home,
    no login shell)."""
    if os.geteuid() != 0 or not (shutil.which("useradd") and shutil.which("runuser") and shutil.which("unshare")):
        pytest.skip("needs root, useradd, runuser and unshare (a second real user, a private /tmp)")
    try:
        import pwd

        return pwd.getpwnam(OTHER_USER).pw_uid
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER], check=True
        )
        return pwd.getpwnam(OTHER_USER).pw_uid


@pytest.mark.timeout(180)
def test_two_users_on_one_node_with_each_others_files_present(other_user):
    """Root's job holds a reservation, listens on one of its ports and holds its Ray start slot,
    with the old scheme's shared /tmp files left by root (mode 0644) and the other user's earlier
    state present; meanwhile ``grpokit-test2`` reserves ports and takes its own start slot.

    Runs in a private mount namespace with a fresh tmpfs on /tmp (``unshare -m``), so the machine's
    /tmp, where other jobs keep their files, is untouched; no kernel setting is changed."""
    found = _other_user_python(other_user)
    if found is None:
        pytest.skip(
            f"no Python {sys.version_info[0]}.{sys.version_info[1]} that {OTHER_USER} can run with this checkout"
        )
    py2, path2 = found
    child = f"PATH = {path2!r}\n" + textwrap.dedent(_USER_SIDE)
    root = f"SRC, USER, PY2, CHILD = {str(REPO / 'src')!r}, {OTHER_USER!r}, {py2!r}, {child!r}\n" + textwrap.dedent(
        _ROOT_SIDE
    )
    t0 = time.monotonic()
    run = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            'mount -t tmpfs -o mode=1777 tmpfs /tmp && exec "$0" -c "$1"',
            sys.executable,
            root,
        ],
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(run.stdout)
    assert res["rc"] == 0, res["stderr"]
    theirs = json.loads(res["child"])
    port = res["port"]

    assert theirs["old_scheme"] == "PermissionError: Permission denied", "the old shared lock would have failed"
    assert theirs["got"] == [port + 1], "root's listening port must be found taken by binding"
    assert theirs["slot_wait_s"] < 2 and theirs["told"] == [], "root's Ray start slot held the other user up"
    assert theirs["root_registry"] == "unreadable"
    assert theirs["state"] == [f"/tmp/grpokit-{other_user}", "0o700", other_user]
    own = f"/tmp/grpokit-{other_user}/"
    assert theirs["opened_tmp"] and all(p.startswith(own) for p in theirs["opened_tmp"]), theirs["opened_tmp"]
    assert res["root_state_mode"] == "0o700"
    kit_opened = res["root_opened_tmp"]  # after the set-up: root's kit code opened only its own folder's files
    assert kit_opened and all(p.startswith("/tmp/grpokit-0/") for p in kit_opened), kit_opened
    assert time.monotonic() - t0 < 60


def test_the_rehearsal_trainers_prompt_count_cache_is_each_users_own(tmp_path):
    """The trainer test double / ``rehearse=true`` caches its prompt count in a per-user 0700 folder:
    the shared ``/tmp/fake_verl_trainer_prompt_filter`` (root's, 0755) failed a second user's job
    with ``PermissionError`` (seen on the local cluster, two users' sweeps on one node)."""
    from grpokit.rehearsal import rehearsal_trainer

    mine = rehearsal_trainer._private_cache(tmp_path / "mine")
    assert mine == tmp_path / "mine" and stat.S_IMODE(mine.stat().st_mode) == 0o700
    (tmp_path / "link").symlink_to(mine)
    assert rehearsal_trainer._private_cache(tmp_path / "link") is None
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)  # another user's folder of that name: neither read nor written
        assert rehearsal_trainer._private_cache(theirs) is None
