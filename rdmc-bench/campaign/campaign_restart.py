#!/usr/bin/env python3
"""campaign_restart.py: the fault campaign's `restart` kind (see fault_campaign.py).

What the members' logs tell about a restart run, and the checks only that
kind has. A restart run's members log the `rdmc::runtime` actor's events at
info level (`peer up`, `peer left`, `group closed`, `group failed`, ...),
each line opening with its wall-clock time (UTC, RFC 3339); the moments
returned here are seconds after the run's start, like the campaign's other
moments. Python 3 standard library only.
"""

import calendar
import re
import time

# A survivor still running lets the restarted victim in (logs its `peer up`
# with a higher incarnation than the first run's) within this many seconds
# of the victim's start.
READMIT_WITHIN = 2.0

STAMP_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z\s")
PEER_UP_RE = re.compile(r"\bpeer up peer=(\d+) incarnation=(\d+)")
# the moment a member's work ended: its group closed or failed, or was
# never made
OUTCOME_RE = re.compile(r"\b(?:group closed|group failed|group not created)\b")


def stamped_lines(path, wall0):
    """The lines of a member's log that open with a time stamp, as
    (seconds after wall0, line)."""
    found = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = STAMP_RE.match(line)
                if m:
                    seconds = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
                    fraction = float("0." + m.group(2)) if m.group(2) else 0.0
                    found.append((seconds + fraction - wall0, line))
    except OSError:
        pass
    return found


def ended_at(lines):
    """When the member's work ended (its group closed, failed or was not
    made), or None when its log does not say."""
    return next((t for t, line in lines if OUTCOME_RE.search(line)), None)


def readmitted_after(lines, victim, restart_at):
    """Seconds from the victim's restart to the `peer up` of a run of it
    newer than the first one this member saw before the restart (any run,
    when it saw none), or None when it is not logged."""
    first = None
    for t, line in lines:
        m = PEER_UP_RE.search(line)
        if not m or int(m.group(1)) != victim:
            continue
        incarnation = int(m.group(2))
        if t < restart_at:
            if first is None:
                first = incarnation
        elif first is None or incarnation > first:
            return t - restart_at
    return None


def judge_restart(plan, outcome, again, bound):
    """The violations only a restart run can have: the restarted process
    did not end its work (its log says its group closed, failed or was not
    made, or it exited) within bound seconds of its start, unless it
    succeeded (hang; past the run's wall-time bound the general check says
    so); a survivor still running did not let it in (not_readmitted). Its
    other promises (no exit 0 without the data, no `.part` file) are the
    general checks'."""
    victim = plan["victims"][0]
    if again["at"] is None:
        return []
    violations = []
    ended = again["ended_at"]
    if not again["hung"] and again["code"] != 0 and (ended is None or ended - again["at"] > bound):
        violations.append({"class": "hang", "members": ["restarted"], "bound": bound,
                           "after": None if ended is None else round(ended - again["at"], 3)})
    deadline = again["at"] + READMIT_WITHIN
    missed = []
    for r in range(plan["members"]):
        if r == victim:
            continue
        exit_at = outcome["exit_at"][r]
        if exit_at is not None and exit_at <= deadline:
            continue  # gone before it had to: nothing to check
        after = again["readmitted"][r]
        if after is None or after > READMIT_WITHIN:
            missed.append({"member": r, "after": after})
    if missed:
        violations.append({"class": "not_readmitted", "members": missed,
                           "bound": READMIT_WITHIN})
    return violations
