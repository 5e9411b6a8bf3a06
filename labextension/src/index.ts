/**
 * Check my work, in JupyterLab: the command `course-check:check` (a notebook toolbar button and an item of the Run
 * menu, declared in schema/plugin.json) saves the open notebook and sends it through the notebook's own `check()` cell
 * (id `check_my_work`, written by autograder/authoring/criteria.py from check_client.py), run in the notebook's kernel
 * so that the address and token are the kernel's, as for `check()` typed in a cell. `check(wait=False)` returns as
 * soon as the service has received the check; a notification then shows, each second, what the service says of it
 * (received, its place in the queue, the seconds so far), each time from a short run in the kernel, which is free
 * between them: the learner keeps working, and running cells. The answer ends it: its first line in the notification,
 * the whole as text in a dialog that the notification's button opens. A check() cell from before `wait=False` (an
 * older release) is run whole, as then, while the notification counts the seconds.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Kernel, KernelMessage } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

const COMMAND = 'course-check:check';
const CELL = 'check_my_work';
const TITLE = 'Check my work';
const FOLLOWS = /def check\([^)]*\bwait=True\b/; // a check() that can return at once (wait=False)
const NAME = '_course_check'; // the kernel's name for the function that asks how the check goes
const POLL_MS = 1000;
const GIVE_UP_MS = 15 * 60 * 1000;

/** What the service says of a check: while it waits its `state` is "queued" or "grading"; "done" for the answer. */
interface IWord {
  state: string;
  text: string;
  total?: number;
}

/** A dialog that shows `text` as text: the service's words are never markup. */
async function show(text: string): Promise<void> {
  const body = new Widget({ node: document.createElement('pre') });
  body.addClass('course-check');
  body.node.textContent = text;
  await showDialog({ title: TITLE, body, buttons: [Dialog.okButton({ label: 'Close' })] });
}

/** Run `code` in `kernel` (not in the notebook's history); what it printed, its error as `name: value`. */
async function run(kernel: Kernel.IKernelConnection, code: string): Promise<string> {
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
  return printed;
}

/** The service's word that `code` printed last, as JSON; what it printed, as the answer, when that is not one. */
async function ask(kernel: Kernel.IKernelConnection, code: string): Promise<IWord> {
  const printed = await run(kernel, `${code}\nprint(__import__("json").dumps(${NAME}()))\n`);
  const last = printed.trim().split('\n').pop() ?? '';
  try {
    const word = JSON.parse(last) as IWord;
    if (typeof word.state === 'string' && typeof word.text === 'string') {
      return word;
    }
  } catch {
    // not the service's word: an error in the kernel (a restart forgets the check), said below
  }
  return { state: 'done', text: `The check's progress could not be read from the kernel: ${printed.trim()}` };
}

const sleep = (ms: number) => new Promise(resolve => setTimeout(resolve, ms));
const checking = new WeakSet<NotebookPanel>();

/** Save `panel`'s notebook, send it through its check() cell in its kernel and show how the check goes, then its
 * answer, in a notification. */
async function check(panel: NotebookPanel): Promise<void> {
  const cell = Array.from(panel.content.model?.cells ?? []).find(c => c.id === CELL);
  if (!cell) {
    await show("This notebook has no check() cell: only the course's exercise notebooks can be checked.");
    return;
  }
  if (checking.has(panel)) {
    Notification.info(`${TITLE}: this notebook's check is under way; its answer comes in its notification.`, {
      autoClose: 5000
    });
    return;
  }
  checking.add(panel);
  const id = Notification.emit(`${TITLE}: saving and sending your notebook…`, 'in-progress', { autoClose: false });
  try {
    await panel.sessionContext.ready; // a kernel still starting is waited for
    const kernel = panel.sessionContext.session?.kernel;
    if (!kernel) {
      Notification.dismiss(id);
      await show('This notebook has no running kernel: start one, then check again.');
      return;
    }
    await panel.context.save();
    const name = JSON.stringify(panel.context.path.split('/').pop());
    const source = cell.sharedModel.getSource();
    let word: IWord;
    const follows = FOLLOWS.test(source);
    if (follows) {
      const until = Date.now() + GIVE_UP_MS;
      word = await ask(kernel, `${source}\n${NAME} = check(notebook=${name}, wait=False)`);
      while (word.state !== 'done' && Date.now() < until) {
        Notification.update({ id, message: word.text, type: 'in-progress', autoClose: false });
        await sleep(POLL_MS);
        word = await ask(kernel, '');
      }
      if (word.state !== 'done') {
        word = { state: 'done', text: 'No answer came within 15 minutes: check again later.' };
      }
    } else {
      const sent = Date.now();
      const tick = () =>
        Notification.update({
          id,
          message: `Check sent: waiting for its answer (${Math.round((Date.now() - sent) / 1000)} s so far)`,
          type: 'in-progress',
          autoClose: false
        });
      tick();
      const timer = setInterval(tick, POLL_MS);
      try {
        const printed = await run(kernel, `${source}\ncheck(notebook=${name})\n`);
        word = { state: 'done', text: printed.trim() || 'The check printed nothing.' };
      } finally {
        clearInterval(timer);
      }
    }
    const text = word.text;
    Notification.update({
      id,
      message: text.split('\n')[0],
      type: word.total !== undefined ? 'success' : follows ? 'warning' : 'info',
      autoClose: false,
      actions: [
        {
          label: 'Show the answer',
          callback: event => {
            event.preventDefault(); // the notification stays, to show the answer again
            void show(text);
          }
        }
      ]
    });
  } catch (e) {
    Notification.update({ id, message: `${TITLE}: ${e}`, type: 'error', autoClose: false });
  } finally {
    checking.delete(panel);
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'course-check:plugin',
  description: 'Check my work: save the notebook and send it through its check() in its kernel.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, notebooks: INotebookTracker) => {
    const current = (): NotebookPanel | null =>
      notebooks.currentWidget !== null && notebooks.currentWidget === app.shell.currentWidget
        ? notebooks.currentWidget
        : null;
    app.commands.addCommand(COMMAND, {
      label: TITLE,
      caption: 'Save this notebook and see what the hidden tests say of it (no grade changes); keep working meanwhile',
      isEnabled: () => current() !== null,
      execute: () => {
        const panel = current();
        if (panel) {
          void check(panel); // the command ends at once: the check goes on beside the learner's work
        }
      }
    });
  }
};

export default plugin;
