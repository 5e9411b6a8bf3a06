// Check my work, in JupyterLab: the command `course-check:check` (a notebook toolbar button and an item of the Run
// menu, declared in schemas/course-check/plugin.json) saves the open notebook, runs the notebook's own `check()` cell
// (id `check_my_work`, written by autograder/authoring/criteria.py from check_client.py) in the notebook's kernel
// and shows what it prints. Its address and token are the kernel's, as for `check()` typed in a cell.
//
// A JupyterLab extension is a module-federation container (window._JUPYTERLAB[name] with init and get); this one
// needs nothing from JupyterLab's shared modules, so it is written by hand and needs no build.
(function () {
  "use strict";
  const CELL = "check_my_work";

  function notebookOf(widget) {
    return widget && widget.context && widget.sessionContext && widget.content && widget.content.model
      ? widget : null;
  }

  function show(title, text) {
    const dialog = document.createElement("dialog");
    dialog.className = "course-check";
    dialog.setAttribute("aria-label", title);
    dialog.style.cssText = "max-width:60em;width:80vw;border:1px solid var(--jp-border-color1,#ccc);" +
      "background:var(--jp-layout-color1,#fff);color:var(--jp-ui-font-color1,#000)";
    const heading = document.createElement("h2");
    heading.textContent = title;
    const answer = document.createElement("pre");
    answer.style.cssText = "white-space:pre-wrap;overflow-wrap:anywhere;max-height:60vh;overflow:auto";
    answer.textContent = text;                       // the service's words are text, never markup
    const close = document.createElement("button");
    close.textContent = "Close";
    close.addEventListener("click", () => dialog.close());
    dialog.addEventListener("close", () => dialog.remove());
    dialog.append(heading, answer, close);
    document.body.appendChild(dialog);
    dialog.showModal();
  }

  async function check(panel) {
    const cell = (panel.context.model.toJSON().cells || []).find((c) => c.id === CELL);
    if (!cell) {
      show("Check my work", "This notebook has no check() cell: only the course's exercise notebooks can be checked.");
      return;
    }
    await panel.sessionContext.ready;                 // a kernel still starting is waited for
    const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
    if (!kernel) {
      show("Check my work", "This notebook has no running kernel: start one, then check again.");
      return;
    }
    await panel.context.save();
    const source = Array.isArray(cell.source) ? cell.source.join("") : cell.source;
    const name = panel.context.path.split("/").pop();
    const code = source + "\ncheck(notebook=" + JSON.stringify(name) + ")\n";
    let printed = "";
    const future = kernel.requestExecute({ code: code, silent: false, store_history: false });
    future.onIOPub = (msg) => {
      if (msg.header.msg_type === "stream") {
        printed += msg.content.text;
      } else if (msg.header.msg_type === "error") {
        printed += msg.content.ename + ": " + msg.content.evalue + "\n";
      }
    };
    await future.done;
    show("Check my work", printed.trim() || "The check printed nothing.");
  }

  const plugin = {
    id: "course-check:plugin",
    description: "Check my work: save the notebook and run its check() in its kernel.",
    autoStart: true,
    activate: (app) => {
      app.commands.addCommand("course-check:check", {
        label: "Check my work",
        caption: "Save this notebook and show what the hidden tests say of it (no grade changes)",
        isEnabled: () => notebookOf(app.shell.currentWidget) !== null,
        execute: async () => {
          const panel = notebookOf(app.shell.currentWidget);
          if (panel) {
            await check(panel);
          }
        },
      });
    },
  };

  (window._JUPYTERLAB = window._JUPYTERLAB || {})["course-check"] = {
    init: () => Promise.resolve(),
    get: (module) => module === "./extension"
      ? Promise.resolve(() => ({ __esModule: true, default: plugin }))
      : Promise.reject(new Error("course-check has no module " + module)),
  };
})();
