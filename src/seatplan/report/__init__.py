"""``seatplan report``: one self-contained HTML page of the plan, the week's usage and the GPUs' history."""
