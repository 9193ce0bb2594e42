"""The documents that pass between the stages, and the one place every stage imports them from.

| module | document | written by | read by |
|---|---|---|---|
| ``fleet`` / ``fleet_file`` | the fleet file (hosts, GPUs, seats, policy) and its loader | the operator | every stage |
| ``usage`` | the usage report (``seatplan usage -o``) | usage | plan, report |
| ``observed`` | the diagnose report and the observations file (``seatplan diagnose -o``) | observe | plan, report |
| ``plan`` | the plan (``seatplan plan -o``) | plan | render, verify, report, observe |
| ``io`` | reading any of them back with located errors | | every stage |

A stage imports documents from here and never another stage's internals.
"""
