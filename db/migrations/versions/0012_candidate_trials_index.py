"""An index for the candidates standing for a study's trials.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25

- ``ix_candidates_problem_trial`` on ``candidates (problem_id, tier, trial_number)``: the
  planner reads the candidates of a study's trials (``db.candidates.of_trials``: a problem's
  candidates of one tier, by trial number) each time it tells a study what its trials measured.
  Without it that read scanned the whole table, a cost that grew with every candidate ever
  stored and took the database's cores from the requests.
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_candidates_problem_trial", "candidates",
                    ["problem_id", "tier", "trial_number"])


def downgrade() -> None:
    op.drop_index("ix_candidates_problem_trial", "candidates")
