"""Offline models the eval tests run with (imported by the eval's kernels as `module:attribute`).

`dabench` answers the DABench sample the way a mixed agent would: some questions right (two of
them by computing the value with the `python` tool in the kernel), some wrong, some in the wrong
form, so the score is what the checks compute.
"""

from __future__ import annotations

import re

from flue_nb.models import FunctionModel, reply, tool_call
from flue_nb.runtime.messages import ToolResultMessage, UserMessage

# Question id -> (code the agent runs, the answer made from the tool's output).
COMPUTED = {
    "mean age": (
        "import pandas as pd\nmean_age = round(pd.read_csv('insurance.csv')['age'].mean(), 2)\nprint(mean_age)",
        "The mean age is {}.\n@mean_age[{}]",
    ),
    "outliers in the fare": (
        "import pandas as pd\nf = pd.read_csv('titanic.csv')['Fare']\nz = (f - f.mean()) / f.std()\n"
        "outlier_count = int(((z > 3) | (z < -3)).sum())\nprint(outlier_count)",
        "{} fares are outliers.\n@outlier_count[{}]",
    ),
}

# Answered from memory: right, half right, wrong, and not in the @name[value] form.
FIXED = {
    "trading volume column": "@mean_volume[2260508.04]",  # right (421)
    "k-Nearest": "@child_count[72]\n@senior_count[22]",  # right (523)
    "mean temperature": "@mean_temperature[29.14]",  # right (683)
    "STEM": "@range_STEM[17.7]\n@mean_STEM[99.99]",  # one of two wrong (496)
    "outliers in the trading volume": "@outliers_count[3]",  # wrong (418)
}


def _prompt(request) -> str:
    return next(m.text for m in request.messages if isinstance(m, UserMessage))


def _answer(request):
    prompt = _prompt(request)
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    for key, (code, template) in COMPUTED.items():
        if key in prompt:
            if not results:
                return reply("Let me compute it.", tool_call("python", code=code))
            value = re.findall(r"-?\d+(?:\.\d+)?", results[-1].content)[0]  # the printed value
            return reply(template.format(value, value))
    for key, text in FIXED.items():
        if key in prompt:
            return reply(text)
    return reply("I could not work this one out.")


dabench = FunctionModel(_answer, id="dabench-offline")


# The check kinds: each prompt names what the model says (and does in the kernel).
def _checks(request):
    prompt = _prompt(request)
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    if "clean the table" in prompt:
        if not results:
            code = (
                "import pandas as pd\ndf_clean = df.dropna()\ndf_clean.to_csv('clean.csv', index=False)\n"
                "print(len(df_clean))"
            )
            return reply("Dropping the rows with gaps.", tool_call("python", code=code), usage=(900, 40))
        return reply(f"df_clean keeps {results[-1].content.split()[0]} rows; saved as clean.csv.", usage=(1000, 20))
    said = {
        "exact": "42",
        "normalised": "**The capital is  Paris.**",
        "number right": "The mean is 3.1417 after rounding.",
        "number wrong": "The mean is 3.5.",
        "regex": "Order #A-1234 shipped today.",
        "judge": "Paris, because it is the seat of the French government.",
        "judge bad": "Lyon.",
    }
    for key in sorted(said, key=len, reverse=True):
        if f"[{key}]" in prompt:
            return reply(said[key], usage=(500, 10))
    return reply("?")


checks = FunctionModel(_checks, id="checks-offline")


def _judge(request):
    text = request.messages[-1].text
    answer = text.rsplit("The agent's answer:", 1)[-1]
    if "because" in answer:
        return reply('{"pass": true, "score": 0.9, "reason": "the answer gives its reason"}')
    return reply('{"pass": false, "score": 0.2, "reason": "the answer gives no reason"}')


judge = FunctionModel(_judge, id="judge-offline")


# Priced as Claude Haiku 4.5 (the id names it): every answer reports 20,000 tokens in and 500 out.
def _priced(request):
    return reply("@answer[1]", usage=(20_000, 500))


priced = FunctionModel(_priced, id="claude-haiku-4-5")


# For the resume test: the case named "slow" waits until the test kills the run, unless
# FLUE_EVAL_TEST_FAST is set (the second attempt).
async def _resumable(request):
    import asyncio
    import os

    prompt = _prompt(request)
    if "slow" in prompt and not os.environ.get("FLUE_EVAL_TEST_FAST"):
        await asyncio.sleep(600)
    return reply(f"done: {prompt.split()[-1]}")


resumable = FunctionModel(_resumable, id="resumable-offline")


# A case that never ends (its python call sleeps past any timeout a test gives) beside one that
# answers at once: the per-case timeout must end the first and keep the second.
def _slow(request):
    prompt = _prompt(request)
    if "[stuck]" in prompt and not any(isinstance(m, ToolResultMessage) for m in request.messages):
        return reply("Working on it.", tool_call("python", code="import time\ntime.sleep(600)"))
    return reply("42")


slow = FunctionModel(_slow, id="slow-offline")
