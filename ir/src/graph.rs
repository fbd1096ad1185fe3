//! Modules, graphs, nodes and SSA values.
//!
//! A [`Module`] holds one [`WeightStore`] and several [`Graph`]s (one per
//! sequence-length bucket; prefill and decode). A graph owns an arena of
//! values and a list of nodes in schedule order; each value is defined once,
//! by a graph input, a module weight, or a node output. Passes edit graphs
//! through the methods here and re-run analyses ([`Graph::producers`],
//! [`Graph::users`]) when they need them rather than keeping them in sync.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use crate::bucket::BucketInfo;
use crate::ops::Op;
use crate::plan::MemoryPlan;
use crate::shape::TensorType;
use crate::weights::WeightStore;

/// Index of a value in its graph's arena.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl ValueId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Debug for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

/// What defines a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueDef {
    /// A graph input.
    Input,
    /// A module weight, by name.
    Weight(String),
    /// An output of a node (find which with [`Graph::producers`]).
    Node,
}

/// A value: its name (unique in the graph), type and definition.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub name: String,
    pub ty: TensorType,
    pub def: ValueDef,
}

/// An op applied to operands, defining its results.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
}

/// Where a value is produced: node index and output position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Producer {
    pub node: usize,
    pub output: usize,
}

/// A dataflow graph in SSA form.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub name: String,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Nodes in schedule order: every operand is defined before its use.
    pub nodes: Vec<Node>,
    values: Vec<Value>,
    by_name: HashMap<String, ValueId>,
    weights: HashMap<String, ValueId>,
    next_fresh: usize,
}

/// Error for a value name that is already taken.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("value `%{0}` is defined twice")]
pub struct DuplicateName(pub String);

impl Graph {
    pub fn new(name: impl Into<String>) -> Graph {
        Graph {
            name: name.into(),
            ..Graph::default()
        }
    }

    fn push_value(
        &mut self,
        name: String,
        ty: TensorType,
        def: ValueDef,
    ) -> Result<ValueId, DuplicateName> {
        if self.by_name.contains_key(&name) {
            return Err(DuplicateName(name));
        }
        let id = ValueId(self.values.len() as u32);
        self.by_name.insert(name.clone(), id);
        self.values.push(Value { name, ty, def });
        Ok(id)
    }

    /// Appends a graph input.
    pub fn add_input(
        &mut self,
        name: impl Into<String>,
        ty: TensorType,
    ) -> Result<ValueId, DuplicateName> {
        let id = self.push_value(name.into(), ty, ValueDef::Input)?;
        self.inputs.push(id);
        Ok(id)
    }

    /// The value that refers to module weight `name` (created on first use).
    pub fn weight(&mut self, name: &str, ty: TensorType) -> ValueId {
        if let Some(&id) = self.weights.get(name) {
            return id;
        }
        let id = ValueId(self.values.len() as u32);
        // Weight values live in their own namespace (`@name`), so they never
        // clash with `%` names; the arena entry keeps the weight's name.
        self.values.push(Value {
            name: name.to_string(),
            ty,
            def: ValueDef::Weight(name.to_string()),
        });
        self.weights.insert(name.to_string(), id);
        id
    }

    /// Appends a node whose results get the given names and types.
    pub fn add_node(
        &mut self,
        op: impl Into<Op>,
        inputs: Vec<ValueId>,
        results: Vec<(String, TensorType)>,
    ) -> Result<Vec<ValueId>, DuplicateName> {
        let outputs = results
            .into_iter()
            .map(|(name, ty)| self.push_value(name, ty, ValueDef::Node))
            .collect::<Result<Vec<_>, _>>()?;
        self.nodes.push(Node {
            op: op.into(),
            inputs,
            outputs: outputs.clone(),
        });
        Ok(outputs)
    }

    /// A node result name not used yet, built from `hint`.
    pub fn fresh_name(&mut self, hint: &str) -> String {
        if !self.by_name.contains_key(hint) && !hint.is_empty() {
            return hint.to_string();
        }
        loop {
            let name = format!("{hint}{}", self.next_fresh);
            self.next_fresh += 1;
            if !self.by_name.contains_key(&name) {
                return name;
            }
        }
    }

    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.index()]
    }

    pub fn value_mut(&mut self, id: ValueId) -> &mut Value {
        &mut self.values[id.index()]
    }

    pub fn ty(&self, id: ValueId) -> &TensorType {
        &self.values[id.index()].ty
    }

    /// All values in the arena, including ones no longer used.
    pub fn values(&self) -> impl Iterator<Item = (ValueId, &Value)> {
        self.values
            .iter()
            .enumerate()
            .map(|(i, v)| (ValueId(i as u32), v))
    }

    pub fn value_count(&self) -> usize {
        self.values.len()
    }

    /// Looks a `%name` up.
    pub fn find(&self, name: &str) -> Option<ValueId> {
        self.by_name.get(name).copied()
    }

    /// Looks a weight reference `@name` up.
    pub fn find_weight(&self, name: &str) -> Option<ValueId> {
        self.weights.get(name).copied()
    }

    /// Renames a value; fails if the new name is taken.
    pub fn rename(&mut self, id: ValueId, name: String) -> Result<(), DuplicateName> {
        if self.by_name.get(&name).is_some_and(|&other| other != id) {
            return Err(DuplicateName(name));
        }
        let old = std::mem::replace(&mut self.values[id.index()].name, name.clone());
        self.by_name.remove(&old);
        self.by_name.insert(name, id);
        Ok(())
    }

    /// For every value, the node output that defines it (if any).
    pub fn producers(&self) -> Vec<Option<Producer>> {
        let mut p = vec![None; self.values.len()];
        for (n, node) in self.nodes.iter().enumerate() {
            for (o, v) in node.outputs.iter().enumerate() {
                p[v.index()] = Some(Producer { node: n, output: o });
            }
        }
        p
    }

    /// For every value, the indices of the nodes that use it.
    pub fn users(&self) -> Vec<Vec<usize>> {
        let mut u = vec![Vec::new(); self.values.len()];
        for (n, node) in self.nodes.iter().enumerate() {
            for v in &node.inputs {
                if u[v.index()].last() != Some(&n) {
                    u[v.index()].push(n);
                }
            }
        }
        u
    }

    /// Replaces every use of `old` (operands and graph outputs) by `new`.
    pub fn replace_all_uses(&mut self, old: ValueId, new: ValueId) {
        for node in &mut self.nodes {
            for v in &mut node.inputs {
                if *v == old {
                    *v = new;
                }
            }
        }
        for v in &mut self.outputs {
            if *v == old {
                *v = new;
            }
        }
    }

    /// Drops values that nothing defines or uses any more and renumbers the
    /// rest (ids held across this call become invalid).
    pub fn compact(&mut self) {
        let mut live = vec![false; self.values.len()];
        for v in self.inputs.iter().chain(&self.outputs) {
            live[v.index()] = true;
        }
        for node in &self.nodes {
            for v in node.inputs.iter().chain(&node.outputs) {
                live[v.index()] = true;
            }
        }
        let mut remap = vec![None; self.values.len()];
        let old = std::mem::take(&mut self.values);
        self.by_name.clear();
        self.weights.clear();
        for (i, v) in old.into_iter().enumerate() {
            if !live[i] {
                continue;
            }
            let id = ValueId(self.values.len() as u32);
            remap[i] = Some(id);
            match &v.def {
                ValueDef::Weight(w) => {
                    self.weights.insert(w.clone(), id);
                }
                _ => {
                    self.by_name.insert(v.name.clone(), id);
                }
            }
            self.values.push(v);
        }
        let map = |v: &mut ValueId| *v = remap[v.index()].expect("live value");
        self.inputs.iter_mut().for_each(map);
        self.outputs.iter_mut().for_each(map);
        for node in &mut self.nodes {
            node.inputs.iter_mut().for_each(map);
            node.outputs.iter_mut().for_each(map);
        }
    }
}

/// A compilation unit: graphs sharing one weight store.
#[derive(Clone, Debug, Default)]
pub struct Module {
    pub name: String,
    pub weights: WeightStore,
    pub graphs: Vec<Graph>,
    /// For graphs made by `bucket-specialize`, what each was made from, by graph name.
    pub buckets: BTreeMap<String, BucketInfo>,
    /// Memory plans made by `plan-memory`, by graph name. A pass that changes
    /// a planned graph must drop or redo its plan (the verifier checks plans
    /// against their graphs).
    pub plans: BTreeMap<String, MemoryPlan>,
}

impl Module {
    pub fn new(name: impl Into<String>) -> Module {
        Module {
            name: name.into(),
            ..Module::default()
        }
    }

    pub fn graph(&self, name: &str) -> Option<&Graph> {
        self.graphs.iter().find(|g| g.name == name)
    }
}
