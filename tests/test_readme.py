"""README.md stays true: its two fresh-machine commands are the main job and exactly what `.ci/run` runs, every path it
names exists, and every relative link in the README and docs/ reaches a file and, with `#anchor`, a heading there."""
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(path: str) -> str:
  with open(os.path.join(ROOT, path), encoding="utf-8") as f:
    return f.read()


def _bash_blocks(text: str) -> list:
  return re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S)


def test_the_first_two_commands_are_the_main_job_and_the_ci_test_command():
  ci = [line.strip() for line in _read(".ci/run").splitlines() if line.startswith("python -m ")]
  install, test = [line for line in ci if " pip install " in line], [line for line in ci if " pytest " in line]
  assert len(install) == len(test) == 1
  main_job, tests = _bash_blocks(_read("README.md"))[:2]
  assert main_job.strip() == "pip install -e '.[envs]' && python experiments/train.py --config=configs/alfworld.py"
  assert tests.strip() == f"{install[0]} && {test[0]}"


def test_every_path_the_readme_names_exists():
  paths = [p for p in re.findall(r"`([^`\s]+)`", _read("README.md"))
           if ("/" in p or re.search(r"\.(py|md|ipynb)$", p)) and not re.search(r"[=*<>{}:]", p)
           and not p.startswith("runs/")]  # what a run writes
  assert len(paths) > 20
  missing = [p for p in paths
             if not any(os.path.exists(os.path.join(ROOT, base, p))
                        for base in ("", "agentopd_jax", "agentopd_jax/envs", "agentopd_jax/training",
                                     "agentopd_jax/methods", "configs", "experiments", "notebooks"))]
  assert not missing, missing


def _slug(heading: str) -> str:
  """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: str) -> set:
  anchors, seen, in_code = set(), {}, False
  for line in open(path, encoding="utf-8"):
    if line.startswith("```"):
      in_code = not in_code
    elif not in_code and (m := re.match(r"#{1,6} (.*)", line)):
      slug = _slug(m.group(1))
      anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
      seen[slug] = seen.get(slug, 0) + 1
  return anchors


def test_relative_links_in_the_readme_and_docs_resolve():
  files = ["README.md", "benchmarks/README.md", "results/README.md"] + sorted(
      os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
  broken = []
  for name in files:
    for target in re.findall(r"\]\(([^)\s]+)\)", _read(name)):
      if re.match(r"[a-z]+:", target):
        continue
      path, _, anchor = target.partition("#")
      full = os.path.normpath(os.path.join(ROOT, os.path.dirname(name), path)) if path else os.path.join(ROOT, name)
      if not os.path.exists(full) or (anchor and full.endswith(".md") and anchor not in _anchors(full)):
        broken.append(f"{name}: {target}")
  assert not broken, broken
