"""The nominal model: an analytic system (possibly with wrong parameters) and an integrator."""

from __future__ import annotations

from vimpc._settings import SUBSTEPS, Setting
from vimpc.data.dataset import Dataset
from vimpc.dynamics import DiscreteModel
from vimpc.integrators import (
    FORMS,
    METHODS,
    RULES,
    ExplicitIntegrator,
    Integrator,
    VariationalIntegrator,
)
from vimpc.models._integrated import integrator_model
from vimpc.models.base import ModelFamily


class NominalModel(ModelFamily):
    """An analytic system (possibly with wrong parameters) integrated by a fixed method.

    Args:
        system: the analytic system the model believes in.
        dt: the model (control) step [s].
        integrator, form, substeps, and the bound settings: see :attr:`settings` (and
            ``scenarios/README.md``).

    The state is ``x = (q, v)``, the observation itself, so ``from_obs`` and ``to_obs``
    are identities. In the ``"del"`` form ``v`` is the forward difference velocity, which
    the observed velocity approximates to ``O(dt)``. Nothing is learned: without a bound
    the model is ready at construction; with ``bound = "conformal"``, ``fit(data,
    calibration)`` calibrates its bound (``data`` sets the bound's per-entry shape).
    """

    name = "nominal"
    settings = {
        "integrator": Setting(
            str,
            "midpoint",
            "variational rule (midpoint, trapezoidal, first_order) or explicit method",
            choices=(*RULES, *METHODS),
        ),
        "form": Setting(
            str,
            "position_momentum",
            "variational form: continuous velocity, or the GP-VI paper's forward difference (`del`)",
            choices=FORMS,
        ),
        "substeps": Setting(
            int, 1, "integrator steps per dt; the implicit transcription needs 1", rule=SUBSTEPS
        ),
    }

    def needs_training_data(self) -> bool:
        return False

    def _is_fitted(self) -> bool:
        # nothing to learn: only a bound needs fitting (calibration)
        return self.bound == "none" or super()._is_fitted()

    def _fit(self, data: Dataset | None) -> None:
        """Nothing to learn."""

    def _integrator(self) -> Integrator:
        if self.integrator in RULES:
            return VariationalIntegrator(self.system, self.integrator, self.form)
        return ExplicitIntegrator(self.system, self.integrator)

    def _provides(self) -> set[str]:
        fields = {"energy"}
        if self.integrator in RULES and self.substeps == 1:
            fields.add("residual")
        if self.system.n_holonomic:
            fields.add("constraint")
        if self.system.n_nonholonomic:
            fields.add("velocity_constraint")
        return fields

    def _build(self) -> DiscreteModel:
        return integrator_model(
            self._integrator(), self.dt, substeps=self.substeps, info=self.info()
        )
