"""pytest plugin for nbval: run each cell with history, as JupyterLab and nbconvert do.

nbval sends cells with ``store_history=False``, so every cell runs as ``In [1]``. ``%%nki``
names a kernel's source after its cell (``<cell [3]>:12``); with history the numbers nbval
produces are the ones the stored notebook (executed top to bottom) shows. Loaded by the
Makefile's ``nbval`` target with ``-p tests.notebooks.nbval_history``.
"""

from nbval.kernel import RunningKernel


def _execute_cell_input(self, cell_input, allow_stdin=None):
    # why: the stored notebook's cell names (In [N]) come from a run with history
    return self.kc.execute(cell_input, store_history=True, allow_stdin=allow_stdin,
                           stop_on_error=False)


RunningKernel.execute_cell_input = _execute_cell_input
