"""A process forked after it used a conversation (multiprocessing's default start method on
Linux) is an owner of its own: it does not pass for its parent as the lease holder, and it does
not reuse the parent's conversation, whose event-loop thread stayed in the parent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, os, sys
import flue_nb as flue
from flue_nb.models import FunctionModel, reply

owners = []

def model(request):
    owners.append(session.lease().owner)  # who holds the conversation while its model runs
    return reply(f"answer {len(owners)}")

@flue.agent(name="forked")
def forked():
    flue.use_model(FunctionModel(model), compaction=False)
    return "You answer."

db, cwd = sys.argv[1], sys.argv[2]
session = flue.init(forked, conversation="c", db=db, cwd=cwd)
parent = {"answer": session.prompt("from the parent"), "owner": owners[-1]}
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        session = flue.init(forked, conversation="c", db=db, cwd=cwd)
        child = {"answer": session.prompt("from the child"), "owner": owners[-1]}
        os.write(w, json.dumps(child).encode())
    finally:
        os._exit(0)
os.close(w)
_, status = os.waitpid(pid, 0)
print(json.dumps({"parent": parent, "child": json.loads(os.read(r, 65536) or b"null"), "status": status}))
"""


def test_a_forked_child_is_a_lease_owner_of_its_own_and_runs_its_own_conversation(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "store.sqlite"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    parent, child = seen["parent"], seen["child"]
    assert seen["status"] == 0 and child is not None, done.stderr
    assert parent["answer"] == "answer 1" and child["answer"] == "answer 2"
    assert parent["owner"] != child["owner"]
    assert child["owner"].split(":")[1] != parent["owner"].split(":")[1]  # the child's own pid
