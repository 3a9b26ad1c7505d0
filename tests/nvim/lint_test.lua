-- The nvim-lint definition, run as nvim-lint would run it: its cmd and args on
-- the file, its parser on the output. Writes the parsed items to $VMEM_RESULT.
local file, out, exe = os.getenv("VMEM_FILE"), os.getenv("VMEM_RESULT"), os.getenv("VMEM_EXE")
local linter = require("vmem_lsp.lint")
vim.cmd("edit " .. file)
local bufnr = vim.api.nvim_get_current_buf()
local args = vim.deepcopy(linter.args)
table.insert(args, "--target")
table.insert(args, "v6e")
if linter.append_fname then
  table.insert(args, vim.api.nvim_buf_get_name(bufnr))
end
local command = { exe or linter.cmd }
vim.list_extend(command, args)
local output = vim.fn.system(command)
local items = linter.parser(output, bufnr)
local f = io.open(out, "w")
f:write(vim.fn.json_encode({ exit = vim.v.shell_error, items = items }))
f:close()
vim.cmd("qa!")
