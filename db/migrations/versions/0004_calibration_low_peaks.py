"""``calibrations.peak_low_tflops``: by precision, the lowest calibration pass behind the peak.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23

A calibration measures its GEMMs in several passes; the peak is the median and the lowest pass
is the calibration's noise, which verdict 1 weighs (``search.roofline``). NULL for rows written
before (one pass: the peak stands for it).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("calibrations") as batch:
        batch.add_column(sa.Column("peak_low_tflops", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("calibrations") as batch:
        batch.drop_column("peak_low_tflops")
