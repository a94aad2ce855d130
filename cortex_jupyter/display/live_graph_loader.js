// What each graph widget sends as its module (cortex_jupyter/display/live_graph.py): a
// loader. The real module (live_graph.js) and its CSS travel once per kernel session in
// one shared widget, GraphCode, that every graph names in its `code` trait; here they are
// fetched from it, imported once per page, and each graph gets its own instance.
const modules = (globalThis.__cortexGraphModules ??= new Map()); // shared id -> Promise

function load(model) {
  const ref = model.get("code");
  const id = typeof ref === "string" ? ref.replace(/^IPY_MODEL_/, "") : ref?.model_id;
  let module = modules.get(id);
  if (!module) {
    module = (async () => {
      const shared = await model.widget_manager.get_model(id);
      let style = document.head.querySelector("style[data-cortex-graph]");
      if (!style) {
        style = document.createElement("style");
        style.setAttribute("data-cortex-graph", "");
        document.head.append(style);
      }
      style.textContent = shared.get("css") || "";
      const blob = new Blob([shared.get("code")], { type: "text/javascript" });
      const url = URL.createObjectURL(blob);
      try {
        return await import(/* webpackIgnore: true */ url);
      } finally {
        URL.revokeObjectURL(url);
      }
    })();
    modules.set(id, module);
    module.catch(() => modules.delete(id));
  }
  return module;
}

export default () => {
  let widget;
  const real = (model) =>
    (widget ??= load(model).then((m) => (typeof m.default === "function" ? m.default() : m.default)));
  return {
    async initialize(props) {
      const w = await real(props.model);
      return w.initialize?.(props);
    },
    async render(props) {
      const w = await real(props.model);
      return w.render?.(props);
    },
  };
};
