"""storage.machine: what a run's machine.jsonl says of the machine, one line per start, a torn last line left out."""
import json

from agentopd_jax.storage import machine


def test_each_start_appends_the_machine_and_a_torn_last_line_is_left_out(tmp_path):
  machine.append(tmp_path)
  machine.append(tmp_path)
  first, second = machine.read(tmp_path)
  assert first["time"] <= second["time"] and {k: v for k, v in first.items() if k != "time"} == {
      k: v for k, v in second.items() if k != "time"}
  assert first["cores"] >= 1 and first["backend"] == "cpu" and set(first["isa"]) <= set(machine.ISA)
  with open(tmp_path / machine.FILE, "a") as f:  # a kill while a third start was being written
    f.write(json.dumps(machine.describe())[:20])
  assert len(machine.read(tmp_path)) == 2
  assert machine.read(tmp_path / "elsewhere") == []
