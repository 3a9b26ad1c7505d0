-- An nvim-lint linter: runs `vmem-lsp check --format json` on the file (on save, as
-- nvim-lint users configure) and turns its diagnostics into vim.diagnostic items.
--
--   require("lint").linters.vmem_lsp = require("vmem_lsp.lint")
--   require("lint").linters_by_ft.python = { "vmem_lsp" }
--   vim.api.nvim_create_autocmd("BufWritePost", { callback = function() require("lint").try_lint() end })
local M = {}

local severities = {
  error = vim.diagnostic.severity.ERROR,
  warning = vim.diagnostic.severity.WARN,
  information = vim.diagnostic.severity.INFO,
}

--- Diagnostics of `output` (vmem-lsp's JSON) that belong to the buffer's file.
function M.parse(output, bufnr)
  local ok, report = pcall(vim.json and vim.json.decode or vim.fn.json_decode, output)
  if not ok or type(report) ~= "table" then
    return {}
  end
  local file = vim.fn.fnamemodify(vim.api.nvim_buf_get_name(bufnr), ":p")
  local items = {}
  for _, d in ipairs(report.diagnostics or {}) do
    if vim.fn.fnamemodify(d.abs_path, ":p") == file then
      table.insert(items, {
        lnum = d.range.start_line - 1,
        col = d.range.start_col,
        end_lnum = d.range.end_line - 1,
        end_col = d.range.end_col,
        severity = severities[d.severity] or vim.diagnostic.severity.ERROR,
        code = d.code,
        source = "vmem-lsp",
        message = d.message,
      })
    end
  end
  return items
end

M.cmd = "vmem-lsp"
M.args = { "check", "--format", "json" }
M.stdin = false
M.append_fname = true
M.stream = "stdout"
M.ignore_exitcode = true   -- 1 means "overflows found", which is what we want to show
M.parser = M.parse

return M
