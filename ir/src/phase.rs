//! How far a module has come down the pipeline: [`Phase`].
//!
//! The phase is read off the module itself rather than kept in a field: a
//! module is planned when every graph has a memory plan, bucketed when
//! every graph input has static dims, and symbolic otherwise. So it can
//! never disagree with the graphs, and a module parsed from text or loaded
//! from a package has its phase without any new field in those formats.
//! Passes declare the phase they require and what they invalidate; the pass
//! manager (`slmcc_passes::PassManager`) enforces both.

use std::fmt;

use crate::graph::Module;

/// The phases a module passes through, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Some graph input has a symbolic dim (`seq`, `batch`): the module as
    /// imported, before `bucket-specialize`.
    Symbolic,
    /// Every graph input is static, and some graph has no memory plan.
    Bucketed,
    /// Every graph has a memory plan (`plan-memory`), which the verifier
    /// checks against it.
    Planned,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Symbolic => "symbolic",
            Phase::Bucketed => "bucketed",
            Phase::Planned => "planned",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Module {
    /// The module's phase (see [`Phase`]). A module without graphs is
    /// bucketed: there is nothing to specialize, and nothing planned.
    pub fn phase(&self) -> Phase {
        if self.first_symbolic_input().is_some() {
            Phase::Symbolic
        } else if !self.graphs.is_empty()
            && self.graphs.iter().all(|g| self.plans.contains_key(&g.name))
        {
            Phase::Planned
        } else {
            Phase::Bucketed
        }
    }

    /// The first graph input with a symbolic dim, as `@graph: %name : type`
    /// (for errors that say why a module is still symbolic).
    pub fn first_symbolic_input(&self) -> Option<String> {
        self.graphs.iter().find_map(|g| {
            g.inputs.iter().find_map(|&id| {
                let ty = g.ty(id);
                (!ty.shape.dims().iter().all(|d| d.is_fixed()))
                    .then(|| format!("@{}: %{} : {ty}", g.name, g.value(id).name))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Dim, Graph, MemoryPlan, Shape, TensorType};

    fn module_with_input(dims: Vec<Dim>) -> Module {
        let mut g = Graph::new("main");
        g.add_input("x", TensorType::new(DType::F32, Shape::from(dims)))
            .unwrap();
        let mut m = Module::new("m");
        m.graphs.push(g);
        m
    }

    #[test]
    fn a_symbolic_input_makes_the_module_symbolic() {
        let m = module_with_input(vec![Dim::fixed(1), Dim::sym("seq")]);
        assert_eq!(m.phase(), Phase::Symbolic);
        assert_eq!(
            m.first_symbolic_input().as_deref(),
            Some("@main: %x : f32[1, seq]")
        );
    }

    #[test]
    fn static_inputs_are_bucketed_until_every_graph_is_planned() {
        let mut m = module_with_input(vec![Dim::fixed(1), Dim::fixed(8)]);
        assert_eq!(m.phase(), Phase::Bucketed);
        m.plans.insert("main".into(), MemoryPlan::default());
        assert_eq!(m.phase(), Phase::Planned);
        let mut other = Graph::new("other");
        other
            .add_input("y", TensorType::fixed(DType::F32, &[2]))
            .unwrap();
        m.graphs.push(other);
        assert_eq!(m.phase(), Phase::Bucketed);
    }
}
