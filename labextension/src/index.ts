/**
 * Check my work, in JupyterLab: the command `course-check:check` (a notebook toolbar button and an item of the Run
 * menu, declared in schema/plugin.json) saves the open notebook, runs the notebook's own `check()` cell (id
 * `check_my_work`, written by autograder/authoring/criteria.py from check_client.py) in the notebook's kernel and
 * shows what it prints, as text. Its address and token are the kernel's, as for `check()` typed in a cell.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { KernelMessage } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

const COMMAND = 'course-check:check';
const CELL = 'check_my_work';
const TITLE = 'Check my work';

/** A dialog that shows `text` as text: the service's words are never markup. */
async function show(text: string): Promise<void> {
  const body = new Widget({ node: document.createElement('pre') });
  body.addClass('course-check');
  body.node.textContent = text;
  await showDialog({ title: TITLE, body, buttons: [Dialog.okButton({ label: 'Close' })] });
}

/** Save `panel`'s notebook, run its check() cell in its kernel and show what that prints. */
async function check(panel: NotebookPanel): Promise<void> {
  const cell = Array.from(panel.content.model?.cells ?? []).find(c => c.id === CELL);
  if (!cell) {
    await show("This notebook has no check() cell: only the course's exercise notebooks can be checked.");
    return;
  }
  await panel.sessionContext.ready; // a kernel still starting is waited for
  const kernel = panel.sessionContext.session?.kernel;
  if (!kernel) {
    await show('This notebook has no running kernel: start one, then check again.');
    return;
  }
  await panel.context.save();
  const name = panel.context.path.split('/').pop();
  const code = `${cell.sharedModel.getSource()}\ncheck(notebook=${JSON.stringify(name)})\n`;
  let printed = '';
  const future = kernel.requestExecute({ code, silent: false, store_history: false });
  future.onIOPub = msg => {
    if (KernelMessage.isStreamMsg(msg)) {
      printed += msg.content.text;
    } else if (KernelMessage.isErrorMsg(msg)) {
      printed += `${msg.content.ename}: ${msg.content.evalue}\n`;
    }
  };
  await future.done;
  await show(printed.trim() || 'The check printed nothing.');
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'course-check:plugin',
  description: 'Check my work: save the notebook and run its check() in its kernel.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, notebooks: INotebookTracker) => {
    const current = (): NotebookPanel | null =>
      notebooks.currentWidget !== null && notebooks.currentWidget === app.shell.currentWidget
        ? notebooks.currentWidget
        : null;
    app.commands.addCommand(COMMAND, {
      label: TITLE,
      caption: 'Save this notebook and show what the hidden tests say of it (no grade changes)',
      isEnabled: () => current() !== null,
      execute: async () => {
        const panel = current();
        if (panel) {
          await check(panel);
        }
      }
    });
  }
};

export default plugin;
