//! A check of a protobuf file's wire format before it is parsed: groups
//! (the deprecated wire types 3 and 4) nested deeper than the parser's own
//! recursion limit are refused.
//!
//! The protobuf crate skips an unknown field of the group wire type by
//! recursing once per nested group, with no limit (protobuf 3.4, which the
//! ONNX bindings pin), so a file of nested group tags overflows the stack.
//! ONNX never uses groups. This walk follows the file as the parser will:
//! it descends into the length-delimited fields that `onnx.proto` declares
//! as messages ([`Kind::child`]; the bindings are generated for the lite
//! runtime, without descriptors), iteratively, so the file's nesting never
//! reaches the stack, and measures every run of nested groups. Anything
//! else that is malformed is left for the parser to report.

/// The ONNX messages whose fields hold messages, and the leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Model,
    Graph,
    Node,
    Attribute,
    Tensor,
    SparseTensor,
    ValueInfo,
    Type,
    TypeTensor,
    TypeSequence,
    TypeMap,
    TensorShape,
    TrainingInfo,
    Function,
    TensorAnnotation,
    /// A message without message fields (`StringStringEntryProto`,
    /// `OperatorSetIdProto`, `TensorShapeProto.Dimension`, …).
    Leaf,
}

impl Kind {
    /// The message type of field `number`, when `onnx.proto` declares it a
    /// message (singular or repeated).
    fn child(self, number: u64) -> Option<Kind> {
        use Kind::*;
        Some(match (self, number) {
            (Model, 7) => Graph,
            (Model, 8 | 14) => Leaf,
            (Model, 20) => TrainingInfo,
            (Model, 25) => Function,
            (Graph, 1) => Node,
            (Graph, 5) => Tensor,
            (Graph, 11..=13) => ValueInfo,
            (Graph, 14) => TensorAnnotation,
            (Graph, 15) => SparseTensor,
            (Graph, 16) => Leaf,
            (Node, 5) => Attribute,
            (Node, 9) => Leaf,
            (Attribute, 5 | 10) => Tensor,
            (Attribute, 6 | 11) => Graph,
            (Attribute, 14 | 15) => Type,
            (Attribute, 22 | 23) => SparseTensor,
            (Tensor, 3 | 13 | 16) => Leaf,
            (SparseTensor, 1 | 2) => Tensor,
            (ValueInfo, 2) => Type,
            (ValueInfo, 4) => Leaf,
            (Type, 1 | 8) => TypeTensor,
            (Type, 4 | 9) => TypeSequence,
            (Type, 5) => TypeMap,
            (TypeTensor, 2) => TensorShape,
            (TypeSequence, 1) | (TypeMap, 2) => Type,
            (TensorShape, 1) => Leaf,
            (TrainingInfo, 1 | 2) => Graph,
            (TrainingInfo, 3 | 4) => Leaf,
            (Function, 7) => Node,
            (Function, 9 | 14) => Leaf,
            (Function, 11) => Attribute,
            (Function, 12) => ValueInfo,
            (TensorAnnotation, 2) => Leaf,
            _ => return None,
        })
    }
}

/// The deepest nesting of groups, and of messages, the walk follows (the
/// parser's recursion limit is 100).
pub const MAX_DEPTH: usize = 100;

/// A varint at `at`: its value and the position after it.
fn varint(b: &[u8], at: usize) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for i in 0..10 {
        let byte = *b.get(at + i)?;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            return Some((value, at + i + 1));
        }
    }
    None
}

/// The position after the value of a field of wire type `wire` at `at`
/// (not a group), or `None` where it runs past `end`.
fn skip_value(b: &[u8], wire: u64, at: usize, end: usize) -> Option<usize> {
    let next = match wire {
        0 => varint(b, at)?.1,
        1 => at.checked_add(8)?,
        2 => {
            let (len, at) = varint(b, at)?;
            at.checked_add(usize::try_from(len).ok()?)?
        }
        5 => at.checked_add(4)?,
        _ => return None,
    };
    (next <= end).then_some(next)
}

/// Refuses `bytes`, a serialized `root` message, when groups in it nest
/// deeper than [`MAX_DEPTH`]; says where.
pub fn check_group_nesting(bytes: &[u8], root: Kind) -> Result<(), String> {
    // The messages being walked: (where this one ends, its type).
    let mut stack: Vec<(usize, Kind)> = vec![(bytes.len(), root)];
    let mut at = 0usize;
    while let Some(&(end, kind)) = stack.last() {
        if at >= end {
            stack.pop();
            continue;
        }
        let Some((tag, value_at)) = varint(bytes, at) else {
            return Ok(());
        };
        let (number, wire) = (tag >> 3, tag & 7);
        match wire {
            2 => {
                let Some((len, body)) = varint(bytes, value_at) else {
                    return Ok(());
                };
                let Some(body_end) = usize::try_from(len)
                    .ok()
                    .and_then(|l| body.checked_add(l))
                    .filter(|&e| e <= end)
                else {
                    return Ok(());
                };
                match kind.child(number) {
                    Some(sub) if stack.len() < MAX_DEPTH => {
                        // The parent resumes where the submessage ends.
                        stack.push((body_end, sub));
                        at = body;
                    }
                    _ => at = body_end,
                }
            }
            3 => {
                // A group: walk to its end, counting the nesting.
                let mut depth = 1usize;
                let mut p = value_at;
                while depth > 0 {
                    let Some((tag, next)) = varint(bytes, p) else {
                        return Ok(());
                    };
                    p = match tag & 7 {
                        3 => {
                            depth += 1;
                            if depth > MAX_DEPTH {
                                return Err(format!(
                                    "byte {at}: field {number} opens groups nested deeper than {MAX_DEPTH} \
                                     (ONNX uses no groups: not a valid model)"
                                ));
                            }
                            next
                        }
                        4 => {
                            depth -= 1;
                            next
                        }
                        w => match skip_value(bytes, w, next, end) {
                            Some(n) => n,
                            None => return Ok(()),
                        },
                    };
                }
                at = p;
            }
            w => match skip_value(bytes, w, value_at, end) {
                Some(n) => at = n,
                None => return Ok(()),
            },
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use onnx_protobuf::{Message, TensorProto};

    #[test]
    fn deep_groups_are_refused_anywhere_the_parser_goes() {
        // Field 99 (unknown) as 10,000 nested groups: tag 99<<3|3, then
        // the closing tags 99<<3|4.
        let open = [0x9b, 0x06];
        let close = [0x9c, 0x06];
        let mut deep = Vec::new();
        for _ in 0..10_000 {
            deep.extend_from_slice(&open);
        }
        for _ in 0..10_000 {
            deep.extend_from_slice(&close);
        }
        let e = check_group_nesting(&deep, Kind::Model).unwrap_err();
        assert!(
            e.contains("field 99 opens groups nested deeper than 100"),
            "{e}"
        );
        // The same inside the graph (ModelProto.graph = 7) of a model.
        let mut model = vec![0x3a];
        let mut len = deep.len();
        while len >= 0x80 {
            model.push((len as u8) | 0x80);
            len >>= 7;
        }
        model.push(len as u8);
        model.extend_from_slice(&deep);
        assert!(check_group_nesting(&model, Kind::Model).is_err());
        // Shallow groups are the parser's business, and a real model passes.
        let shallow = [0x9b, 0x06, 0x9b, 0x06, 0x9c, 0x06, 0x9c, 0x06];
        assert!(check_group_nesting(&shallow, Kind::Model).is_ok());
        let mut t = TensorProto::new();
        t.dims = vec![2, 3];
        t.raw_data = vec![0x0b; 24];
        let bytes = t.write_to_bytes().unwrap();
        assert!(check_group_nesting(&bytes, Kind::Tensor).is_ok());
    }
}
