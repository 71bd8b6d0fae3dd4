//! Doubly linked lists threaded through one arena, with an index from key to node: the
//! O(1) building block of every policy (insert at either end, move between lists,
//! unlink, walk from the cold end). A key is in at most one list.

use std::collections::HashMap;
use std::hash::Hash;

use super::hash::KeyedState;

const NIL: u32 = u32::MAX;

/// Which end of a list: the hot end (most recent / newest) or the cold end (next to go).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    Hot,
    Cold,
}

#[derive(Clone, Debug)]
struct Node<K> {
    key: K,
    hotter: u32,
    colder: u32,
    list: u32,
    meta: u8,
}

#[derive(Clone, Copy, Debug)]
struct Ends {
    hot: u32,
    cold: u32,
    len: usize,
}

const EMPTY: Ends = Ends {
    hot: NIL,
    cold: NIL,
    len: 0,
};

#[derive(Clone, Debug)]
pub(crate) struct Linked<K> {
    nodes: Vec<Node<K>>,
    free_nodes: Vec<u32>,
    index: HashMap<K, u32, KeyedState>,
    lists: Vec<Ends>,
    free_lists: Vec<u32>,
}

impl<K: Copy + Eq + Hash> Linked<K> {
    /// An arena with `lists` empty lists, numbered from 0.
    pub(crate) fn new(lists: usize) -> Self {
        Linked {
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            index: HashMap::default(),
            lists: vec![EMPTY; lists],
            free_lists: Vec::new(),
        }
    }

    /// A new empty list (reusing a dropped number).
    pub(crate) fn add_list(&mut self) -> u32 {
        match self.free_lists.pop() {
            Some(l) => l,
            None => {
                self.lists.push(EMPTY);
                (self.lists.len() - 1) as u32
            }
        }
    }

    /// Gives back an empty list's number.
    pub(crate) fn drop_list(&mut self, list: u32) {
        debug_assert_eq!(self.lists[list as usize].len, 0);
        self.free_lists.push(list);
    }

    /// Keys in all lists.
    pub(crate) fn total(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn find(&self, key: &K) -> Option<u32> {
        self.index.get(key).copied()
    }

    pub(crate) fn key(&self, node: u32) -> K {
        self.nodes[node as usize].key
    }

    pub(crate) fn list_of(&self, node: u32) -> u32 {
        self.nodes[node as usize].list
    }

    pub(crate) fn meta(&self, node: u32) -> u8 {
        self.nodes[node as usize].meta
    }

    pub(crate) fn set_meta(&mut self, node: u32, meta: u8) {
        self.nodes[node as usize].meta = meta;
    }

    pub(crate) fn len(&self, list: u32) -> usize {
        self.lists[list as usize].len
    }

    pub(crate) fn coldest(&self, list: u32) -> Option<u32> {
        some(self.lists[list as usize].cold)
    }

    pub(crate) fn hotter(&self, node: u32) -> Option<u32> {
        some(self.nodes[node as usize].hotter)
    }

    /// The coldest node of `list` whose key passes `pred`.
    pub(crate) fn find_cold(&self, list: u32, pred: &dyn Fn(&K) -> bool) -> Option<u32> {
        let mut at = self.coldest(list);
        while let Some(n) = at {
            if pred(&self.nodes[n as usize].key) {
                return Some(n);
            }
            at = self.hotter(n);
        }
        None
    }

    /// The keys of `list` from the cold end to the hot end.
    #[cfg(test)]
    pub(crate) fn keys(&self, list: u32) -> Vec<K> {
        let mut out = Vec::with_capacity(self.len(list));
        let mut at = self.coldest(list);
        while let Some(n) = at {
            out.push(self.key(n));
            at = self.hotter(n);
        }
        out
    }

    /// Adds a key that is in no list.
    pub(crate) fn insert(&mut self, key: K, list: u32, end: End, meta: u8) -> u32 {
        let node = Node {
            key,
            hotter: NIL,
            colder: NIL,
            list,
            meta,
        };
        let n = match self.free_nodes.pop() {
            Some(n) => {
                self.nodes[n as usize] = node;
                n
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        let previous = self.index.insert(key, n);
        assert!(previous.is_none(), "key inserted twice");
        self.link(n, list, end);
        n
    }

    /// Removes a node; returns its key.
    pub(crate) fn remove(&mut self, node: u32) -> K {
        self.unlink(node);
        let key = self.nodes[node as usize].key;
        self.index.remove(&key);
        self.free_nodes.push(node);
        key
    }

    /// Moves a node to an end of a list (the same one or another).
    pub(crate) fn relink(&mut self, node: u32, list: u32, end: End) {
        self.unlink(node);
        self.link(node, list, end);
    }

    fn link(&mut self, n: u32, list: u32, end: End) {
        let ends = self.lists[list as usize];
        let node = &mut self.nodes[n as usize];
        node.list = list;
        match end {
            End::Hot => {
                node.hotter = NIL;
                node.colder = ends.hot;
                if ends.hot != NIL {
                    self.nodes[ends.hot as usize].hotter = n;
                }
            }
            End::Cold => {
                node.colder = NIL;
                node.hotter = ends.cold;
                if ends.cold != NIL {
                    self.nodes[ends.cold as usize].colder = n;
                }
            }
        }
        let ends = &mut self.lists[list as usize];
        if ends.len == 0 {
            ends.hot = n;
            ends.cold = n;
        } else if end == End::Hot {
            ends.hot = n;
        } else {
            ends.cold = n;
        }
        ends.len += 1;
    }

    fn unlink(&mut self, n: u32) {
        let Node {
            hotter, colder, list, ..
        } = self.nodes[n as usize];
        if hotter != NIL {
            self.nodes[hotter as usize].colder = colder;
        } else {
            self.lists[list as usize].hot = colder;
        }
        if colder != NIL {
            self.nodes[colder as usize].hotter = hotter;
        } else {
            self.lists[list as usize].cold = hotter;
        }
        self.lists[list as usize].len -= 1;
    }
}

fn some(n: u32) -> Option<u32> {
    (n != NIL).then_some(n)
}
