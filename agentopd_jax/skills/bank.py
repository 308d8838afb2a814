"""SDAR's SkillBank as it lies on disk, loaded unchanged so `skills.bank_dir` can point at the authors' folders.

Layout (SDAR `skills/<env>/`, read by `verl/trainer/ppo/rlsd_utils.py`):
  skill_mapping.json   {"skill_files": {name: "file.md"}, "task_to_skill": {task_type: name},
                        "task_keywords": {task_type: [keyword, ...]}}   (task_keywords optional)
  <file>.md            one markdown text per skill name; the name "general_skills" is the text every context opens with
  claude_style_skills*.json   optional: SkillRL's bank (general_skills, task_specific_skills, common_mistakes, metadata)

SDAR reads every markdown file `.strip()`ped and looks the general text up by the name "general_skills" ("" when the
mapping has none), so we do the same. Where SDAR would silently skip a task type whose skill name has no file, we
raise: a bank that cannot give a task its skill is a broken bank, and the error names the field. A folder holding only
SkillRL's JSON loads too: its skills are rendered in the markdown style of SDAR's files, one skill per task type.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

GENERAL = "general_skills"  # SDAR's fixed name of the text every context starts with
MAPPING = "skill_mapping.json"
CLAUDE = "claude_style_skills.json"  # SkillRL's bank; SDAR's search folder names it claude_style_skills_search.json


@dataclasses.dataclass(frozen=True)
class SkillBank:
  """general: the general skill text ("" if none). skills: task skill name -> markdown, in `skill_files` order (the
  order SDAR's `skill_all` concatenates them in), without the general one. task_to_skill / task_keywords: as in
  skill_mapping.json, in file order (the order SDAR's rules try them in). claude: SkillRL's JSON, parsed, if present.
  """
  directory: str
  general: str
  skills: Mapping[str, str]
  task_to_skill: Mapping[str, str]
  task_keywords: Mapping[str, Tuple[str, ...]]
  claude: Optional[Mapping[str, Any]] = None

  @classmethod
  def load(cls, directory) -> "SkillBank":
    folder = Path(directory).expanduser()
    if not folder.is_dir():
      raise ValueError(f"skill bank: no such folder {folder}")
    claude_path = _claude_file(folder)
    claude = _read_json(claude_path) if claude_path else None
    if (folder / MAPPING).is_file():
      return _from_mapping(folder, _read_json(folder / MAPPING), claude)
    if claude_path:
      return _from_claude(folder, claude_path, claude)
    raise ValueError(f"skill bank {folder}: neither {MAPPING} nor {CLAUDE} is there")


def _claude_file(folder: Path) -> Optional[Path]:
  if (folder / CLAUDE).is_file():
    return folder / CLAUDE
  found = sorted(folder.glob("claude_style_skills*.json"))
  if len(found) > 1:
    raise ValueError(f"skill bank {folder}: several SkillRL banks {[p.name for p in found]}; keep one")
  return found[0] if found else None


def _read_json(path: Path) -> Any:
  try:
    return json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: not valid JSON ({e})") from None


def _str_dict(value, where: str) -> Dict[str, str]:
  if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
    raise ValueError(f"{where} must be an object of strings")
  return dict(value)


def _from_mapping(folder: Path, mapping, claude) -> SkillBank:
  where = folder / MAPPING
  if not isinstance(mapping, dict):
    raise ValueError(f"{where} must be a JSON object")
  for field in ("skill_files", "task_to_skill"):
    if field not in mapping:
      raise ValueError(f"{where}: missing field {field!r}")
  files = _str_dict(mapping["skill_files"], f"{where}: skill_files")
  task_to_skill = _str_dict(mapping["task_to_skill"], f"{where}: task_to_skill")
  keywords = mapping.get("task_keywords", {})
  if not isinstance(keywords, dict) or not all(
      isinstance(v, list) and all(isinstance(k, str) for k in v) for v in keywords.values()):
    raise ValueError(f"{where}: task_keywords must map task types to lists of strings")
  for task_type, name in task_to_skill.items():
    if name not in files:
      raise ValueError(f"{where}: task_to_skill[{task_type!r}] = {name!r} is not a skill_files name")
  for task_type in keywords:
    if task_type not in task_to_skill:
      raise ValueError(f"{where}: task_keywords[{task_type!r}] names no task_to_skill task type")
  texts = {}
  for name, filename in files.items():
    path = folder / filename
    if not path.is_file():
      raise ValueError(f"{where}: skill_files[{name!r}]: no such file {path}")
    texts[name] = path.read_text().strip()
  general = texts.pop(GENERAL, "")
  return SkillBank(str(folder), general, texts, task_to_skill, {k: tuple(v) for k, v in keywords.items()}, claude)


# ------------------------------------------------------------------------------------------ SkillRL's JSON bank
# SkillRL's task skills sit under "task_specific_skills" (ALFWorld, WebShop) or "query_type_skills" (search).
_TASK_FIELDS = ("task_specific_skills", "query_type_skills")
# when_to_apply phrases that already start like "after ..." read on from "Apply this"; the rest need "when".
_LEADS = frozenset("after anytime as at before during for if immediately just near on once right throughout upon "
                   "when whenever while within".split())


def _sentence(text: str) -> str:
  text = text.strip()
  return text if text.endswith((".", "!", "?")) else text + "."


def _item(i: int, skill: Mapping, where: str) -> str:
  """'N. Title: principle. Apply this when <when_to_apply>.', the shape of SDAR's markdown items."""
  missing = [k for k in ("title", "principle", "when_to_apply") if not isinstance(skill.get(k), str)]
  if missing:
    raise ValueError(f"{where}: skill {skill.get('skill_id', i)!r} lacks string field(s) {missing}")
  when = _sentence(skill["when_to_apply"])
  when = when[:1].lower() + when[1:]
  lead = "Apply this" if when.split(" ", 1)[0] in _LEADS else "Apply this when"
  return f"{i}. {skill['title'].strip()}: {_sentence(skill['principle'])} {lead} {when}"


def _render(header: str, intro: str, skills, where: str) -> str:
  if not isinstance(skills, list):
    raise ValueError(f"{where} must be a list of skills")
  items = "\n\n".join(_item(i, s if isinstance(s, dict) else {}, where) for i, s in enumerate(skills, 1))
  return f"### {header} ###\n\n{intro}\n\n{items}"


def _from_claude(folder: Path, path: Path, claude) -> SkillBank:
  field = next((f for f in _TASK_FIELDS if f in claude), _TASK_FIELDS[0]) if isinstance(claude, dict) else ""
  if not isinstance(claude, dict) or not isinstance(claude.get(field, {}), dict):
    raise ValueError(f"{path}: must be an object whose {field or _TASK_FIELDS[0]} maps task types to skill lists")
  general = _render("GENERAL SKILLS", "Here are some useful general strategies for completing tasks in this "
                    "environment:", claude.get("general_skills", []), f"{path}: general_skills")
  skills = {t: _render(f"TASK: {t}", f"For this {t} task, apply these specific strategies:", items,
                       f"{path}: {field}[{t!r}]") for t, items in claude.get(field, {}).items()}
  return SkillBank(str(folder), general, skills, {t: t for t in skills}, {}, claude)
