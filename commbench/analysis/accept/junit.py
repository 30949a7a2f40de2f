"""Acceptance verdicts as JUnit XML for CI: one testcase per verdict, or one testcase in error
when the acceptance could not be judged at all."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from .outcome import Verdict


def junit_xml(verdicts: list[Verdict], suite_name: str, warnings: list[str] = ()) -> str:
    """JUnit XML: one testcase per verdict, failures with the reason. ``warnings`` (a busy
    machine) become the suite's property machine_busy and lines of its system-out."""
    failures = sum(not v.passed for v in verdicts)
    root = ET.Element("testsuites", name="commbench-accept", tests=str(len(verdicts)),
                      failures=str(failures))
    suite = ET.SubElement(root, "testsuite", name=suite_name, tests=str(len(verdicts)),
                          failures=str(failures), errors="0", skipped="0")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="machine_busy", value="true" if warnings else "false")
    for v in verdicts:
        case = ET.SubElement(suite, "testcase", classname=f"{suite_name}.{v.kind}", name=v.check)
        unit = f" {v.unit}" if v.unit else ""
        if not v.passed:
            fail = ET.SubElement(case, "failure", message=v.reason, type=v.kind)
            fail.text = f"{v.metric + ': ' if v.metric else ''}measured {v.measured}{unit}; " \
                        f"expected {v.expected}{unit}; {v.reason}"
        else:
            ET.SubElement(case, "system-out").text = v.reason
    if warnings:   # JUnit puts the suite's system-out after its testcases
        ET.SubElement(suite, "system-out").text = "\n".join(f"warning: {w}" for w in warnings)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def junit_error_xml(suite_name: str, message: str) -> str:
    """JUnit XML for an acceptance that could not be judged (the suite cannot run here, bad input):
    one testcase in error, with the reason, so CI shows why instead of a missing report."""
    root = ET.Element("testsuites", name="commbench-accept", tests="1", failures="0", errors="1")
    suite = ET.SubElement(root, "testsuite", name=suite_name, tests="1", failures="0", errors="1", skipped="0")
    case = ET.SubElement(suite, "testcase", classname=f"{suite_name}.setup", name="run the acceptance")
    first = message.strip().splitlines()[0] if message.strip() else "error"
    ET.SubElement(case, "error", message=first, type="bad input").text = message
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(path, xml_text: str) -> None:
    """The JUnit file written whole or not at all (a full disk never leaves a 0-byte or cut XML that
    CI would read as no tests); a failure names --junit."""
    from commbench.analysis.outputs import write_text_whole

    write_text_whole(path, xml_text, "--junit")
