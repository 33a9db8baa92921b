//! The set of tools a run may call.

use crate::Tool;
use agentlane_providers::ToolSpec;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

/// Tools by name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    /// Their specs, sorted by name, and the characters a prompt estimate counts for them
    /// ([`spec_chars`]): built at the first request for them once the tools are registered,
    /// then shared by every request and every clone (a spec's JSON schema is not rebuilt per
    /// turn); a registration starts it over.
    built: OnceLock<(Arc<[ToolSpec]>, usize)>,
}

/// The characters a prompt estimate counts for `specs`: each one's name, description and JSON
/// schema as sent.
pub fn spec_chars(specs: &[ToolSpec]) -> usize {
    specs
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
        .sum()
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool; a later tool with the same name replaces the earlier one.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.spec().name, tool);
        self.built = OnceLock::new();
    }

    /// [`Self::register`], by value, for building a registry in one expression.
    pub fn with(mut self, tool: Arc<dyn Tool>) -> Self {
        self.register(tool);
        self
    }

    /// The tool named `name`, if registered.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    /// Specs to send to the model, sorted by name (shared: built once).
    pub fn specs(&self) -> Arc<[ToolSpec]> {
        self.built().0.clone()
    }

    /// [`spec_chars`] of [`Self::specs`], counted once.
    pub fn spec_chars(&self) -> usize {
        self.built().1
    }

    fn built(&self) -> &(Arc<[ToolSpec]>, usize) {
        self.built.get_or_init(|| {
            let specs: Arc<[ToolSpec]> = self.tools.values().map(|t| t.spec()).collect();
            let chars = spec_chars(&specs);
            (specs, chars)
        })
    }
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::current_time::CurrentTime;

    #[test]
    fn the_shared_specs_follow_every_registration_sorted_by_name() {
        let mut registry = ToolRegistry::new();
        assert!(registry.specs().is_empty());
        assert_eq!(registry.spec_chars(), 0);

        registry.register(Arc::new(CurrentTime::new()));
        let time = CurrentTime::new().spec();
        assert_eq!(&*registry.specs(), std::slice::from_ref(&time));
        assert_eq!(
            registry.spec_chars(),
            time.name.len() + time.description.len() + time.parameters.to_string().len()
        );

        // a copy handed out earlier keeps what it had; the registry's specs follow
        let before = registry.specs();
        let named = Arc::new(Renamed("a_first".into()));
        registry.register(named.clone());
        let names: Vec<_> = registry.specs().iter().map(|s| s.name.clone()).collect();
        assert_eq!(names, ["a_first", time.name.as_str()]);
        assert_eq!(before.len(), 1);
        assert_eq!(registry.spec_chars(), spec_chars(&registry.specs()));
    }

    /// The clock under another name.
    struct Renamed(String);

    #[async_trait::async_trait]
    impl Tool for Renamed {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: self.0.clone(),
                ..CurrentTime::new().spec()
            }
        }

        async fn call(
            &self,
            arguments: &str,
            ctx: crate::ToolContext,
        ) -> Result<crate::ToolOutput, crate::ToolError> {
            CurrentTime::new().call(arguments, ctx).await
        }
    }
}
