"""Revert each age rule (and what an exchange sends) of PolderCast's cores in a copy of the tree and list the tests of
tests/unit/test_ages.py that then fail; every rule must fail at least one.

    .venv/bin/python scripts/age_rule_mutations.py
"""

import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
RINGS_FRESHER = ("if d.age < cur.age and (not _same(d.priorities, cur.priorities) or not _same(d.topics, cur.topics)):\n"
                 "                    refreshed[x] = d.aged(cur.age)")
RINGS_NEW = "newcomers[x] = d\n        holes"
MUTATIONS = [  # (file, text, replacement, the rule it breaks)
    ("views.py", "view[nid] = d.aged(d.age + 1)", "view[nid] = d", "no ageing per cycle"),
    ("rings.py", "if x in nbr and x == contact:", "if False:", "RINGS: direct contact does not zero"),
    ("vicinity.py", "view[x] = sender if x == sender.node_id else d", "view[x] = d",
     "VICINITY: direct contact does not zero"),
    ("vicinity.py", "else d if mine is None or mine.age == d.age else d.aged(mine.age)", "else d",
     "VICINITY: the youngest copy's age (the union rule)"),
    ("rings.py", RINGS_FRESHER, "if d.age < cur.age:\n                    refreshed[x] = d",
     "RINGS: the youngest copy's age (the union rule)"),
    ("rings.py", "refreshed[x] = d.aged(cur.age)", "refreshed[x] = d", "RINGS: a fresher profile brings its copy's age"),
    ("cyclon.py", "replaceable.pop()]\n            self.view[d.node_id] = d\n",
     "replaceable.pop()]\n            self.view[d.node_id] = d.aged(0)\n",
     "CYCLON: handed-on entries not retained"),
    ("vicinity.py", "pool[d.node_id] = d\n", "pool[d.node_id] = d.aged(0)\n", "VICINITY: handed-on entries not retained"),
    ("rings.py", RINGS_NEW, "newcomers[x] = d.aged(0)\n        holes", "RINGS: handed-on entries not retained"),
    ("cyclon.py", "q = self.view.pop(pick_oldest(self.view, rng))", "q = self.view[pick_oldest(self.view, rng)]",
     "CYCLON: partner not removed"),
    ("vicinity.py", "q = self.view.pop(pick_oldest(self.view, stack.rng))",
     "q = self.view[pick_oldest(self.view, stack.rng)]", "VICINITY: partner not removed"),
    ("rings.py", "mask(d.topics) & shared]\n", "mask(d.topics) & shared] + [stack.me.aged(0)]\n",
     "RINGS: the node's own profile among the entries sent"),
    ("vicinity.py", "self.rank(q, stack.union().values(), self.gossip_size)",
     "self.rank(q, [*stack.union().values(), stack.me.aged(0)], self.gossip_size)",
     "VICINITY: the node's own profile among the entries sent"),
    ("cyclon.py", "self._merge(msg.entries, sent=kept)", "self._merge((msg.sender.aged(0), *msg.entries), sent=kept)",
     "CYCLON: partner put back on reply"),
]


def main() -> int:
    caught = True
    for name, old, new, rule in MUTATIONS:
        with tempfile.TemporaryDirectory() as tmp:
            tree = pathlib.Path(tmp) / "tree"
            for part in ("node", "tests", "controller", "analysis", "pyproject.toml"):
                copy = shutil.copytree if (ROOT / part).is_dir() else shutil.copy
                copy(ROOT / part, tree / part)
            core = tree / "node" / "core" / name
            text = core.read_text()
            if text.count(old) != 1:
                raise SystemExit(f"{name}: the text to mutate for {rule!r} is not there once")
            core.write_text(text.replace(old, new))
            run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_ages.py"],
                                 cwd=tree, capture_output=True, text=True)
            failed = [line.split("::")[1].split(" ")[0] for line in run.stdout.splitlines() if line.startswith("FAILED")]
            caught &= bool(failed)
            print(f"{rule}: {len(failed)} failed: {', '.join(failed)}")
    return 0 if caught else 1


if __name__ == "__main__":
    sys.exit(main())
