"""run.json's ``searches`` (launch/search_run.py writes one record per `placement: search`): each
record's shape checked before accept replays it, so a damaged record is bad input (exit 2)
naming the file and the key, never a verdict built from Python's error text."""
from __future__ import annotations

from commbench.errors import RunFolderError, preview


def check_search_records(meta: dict, where: str) -> None:
    """RunFolderError naming ``where`` (run.json's path) and the damaged key, if any record is
    not what a search writes."""
    records = meta.get("searches")
    if records is None:
        return
    if not isinstance(records, list):
        _damaged(where, "searches", records, "a list of search records")
    for i, record in enumerate(records):
        at = f"searches[{i}]"
        if not isinstance(record, dict):
            _damaged(where, at, record, "a search record (an object)")
        _list_of(where, f"{at}.nodes", record.get("nodes"), str, "host names")
        if not isinstance(record.get("settings", {}), dict):
            _damaged(where, f"{at}.settings", record.get("settings"), "an object of the search's settings")
        if "done" in record and not isinstance(record["done"], bool):
            _damaged(where, f"{at}.done", record["done"], "true or false")
        waves = record.get("waves")
        _list_of(where, f"{at}.waves", waves, dict, "waves (objects)")
        for w, wave in enumerate(waves):
            _check_wave(where, f"{at}.waves[{w}]", wave)


def _check_wave(where: str, at: str, wave: dict) -> None:
    unhealthy = wave.get("unhealthy", {})
    if not isinstance(unhealthy, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in unhealthy.items()):
        _damaged(where, f"{at}.unhealthy", unhealthy, "an object of host: why it failed GPU health")
    groups = wave.get("groups")
    _list_of(where, f"{at}.groups", groups, dict, "groups (objects)")
    for g, group in enumerate(groups):
        gat = f"{at}.groups[{g}]"
        _list_of(where, f"{gat}.hosts", group.get("hosts"), str, "host names", empty_ok=False)
        if not isinstance(group.get("passed"), bool):
            _damaged(where, f"{gat}.passed", group.get("passed"), "true or false")
        if "proven" in group and not isinstance(group["proven"], bool):
            _damaged(where, f"{gat}.proven", group["proven"], "true or false")
        values = group.get("gpu_values", [])
        if not isinstance(values, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                   for v in values):
            _damaged(where, f"{gat}.gpu_values", values, "a list of numbers")


def _list_of(where: str, key: str, value, kind: type, what: str, empty_ok: bool = True) -> None:
    if not isinstance(value, list) or not all(isinstance(v, kind) for v in value) or (not value and not empty_ok):
        _damaged(where, key, value, f"a list of {what}")


def _damaged(where: str, key: str, value, expected: str):
    shown = "missing" if value is None else preview(value, 60)
    raise RunFolderError(f"{where}: {key} is {shown}, not {expected}: the run's search record is damaged "
                         "(the file was edited or cut); rerun the search, or judge the run without it")
