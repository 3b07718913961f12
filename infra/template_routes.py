"""Keep template.yaml's generated sections in step with the operation registry.

`python infra/template_routes.py` rewrites, between the `# BEGIN ...` / `# END ...` markers:
- each family function's HTTP API events: one route per REST path of its operations;
- the Errors and Throttles alarms of every function.
`--check` fails when the template is stale (a test runs it), so a new operation cannot ship unrouted.
A new family needs its function in template.yaml (copy the memory one, with its `# BEGIN routes <family>`
markers) and a line in the gateway's ENGRAM_FAMILY_FUNCTIONS; tests/unit/test_families.py checks every family.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "template.yaml"
sys.path.insert(0, str(ROOT / "layers" / "engram"))

from engram.families import all_families, select  # noqa: E402

# every family's function (`Family.function`) besides these, each with its two alarms
FIXED = ["Authorizer", "Gateway", "Worker"]


def camel(text: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", text))


def routes(family: str) -> list[str]:
    lines = []
    for op in select(family=family):
        for n, path in enumerate((op.path, *op.also)):
            name = "Rest" + camel(op.name) + (str(n + 1) if n else "")
            full = "/api/v1/{context_id}" + path
            lines.append(f"        {name}:")
            lines.append("          Type: HttpApi")
            lines.append("          Properties:")
            lines.append("            ApiId: !Ref HttpApi")
            lines.append(f"            Method: {op.method}")
            lines.append(f'            Path: "{full}"')
    return lines


def alarms() -> list[str]:
    lines = []
    functions = [f.function.removesuffix("Function") for f in sorted(all_families(), key=lambda f: f.name)]
    for fn in [*FIXED[:2], *functions, *FIXED[2:]]:
        for metric, threshold in (("Errors", 1), ("Throttles", 1)):
            lines += [
                f"  {fn}{metric}Alarm:",
                "    Type: AWS::CloudWatch::Alarm",
                "    Properties:",
                f"      AlarmDescription: The {fn.lower()} function reported {metric.lower()}",
                "      Namespace: AWS/Lambda",
                f"      MetricName: {metric}",
                f"      Dimensions: [{{ Name: FunctionName, Value: !Ref {fn}Function }}]",
                "      Statistic: Sum",
                "      Period: 300",
                "      EvaluationPeriods: 1",
                f"      Threshold: {threshold}",
                "      ComparisonOperator: GreaterThanOrEqualToThreshold",
                "      TreatMissingData: notBreaching",
                "      AlarmActions: [!Ref AlarmTopic]",
            ]
    return lines


def render(text: str) -> str:
    sections = {f"routes {f.name}": routes(f.name) for f in all_families()}
    sections["function alarms"] = alarms()
    for name, lines in sections.items():
        pattern = re.compile(
            rf"(?m)^(\s*# BEGIN {re.escape(name)}\b[^\n]*\n)(.*?)(^\s*# END {re.escape(name)}\n)", re.S
        )
        if not pattern.search(text):
            raise SystemExit(f"template.yaml has no '# BEGIN {name}' / '# END {name}' markers")
        body = "".join(line + "\n" for line in lines)
        text = pattern.sub(lambda m, body=body: m.group(1) + body + m.group(3), text)
    return text


def main() -> int:
    current = TEMPLATE.read_text()
    wanted = render(current)
    if "--check" in sys.argv:
        if wanted != current:
            print(
                "template.yaml is out of step with the registry: run python infra/template_routes.py", file=sys.stderr
            )
            return 1
        return 0
    TEMPLATE.write_text(wanted)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
