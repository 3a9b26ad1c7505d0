-- vmem-lsp for Neovim's built-in LSP client, Neovim 0.7 to 0.10 (and 0.11+ for those who keep it).
--
-- On Neovim 0.11+, lsp/vmem_lsp.lua is the way: with editors/nvim on the runtime path,
-- vim.lsp.enable("vmem_lsp"), and vim.lsp.config("vmem_lsp", { cmd = ..., settings = { vmemLsp = ... },
-- init_options = { trustedFolders = ... } }) for your own options (see that file).
--
-- On 0.7 to 0.10 (the same options, under other names):
--
--   require("vmem_lsp").setup({
--     cmd = { "/path/to/venv/bin/python", "-m", "vmem_lsp", "serve" },  -- default: { "vmem-lsp", "serve" }
--     settings = { targets = { "v5e", "v6e" }, headroomWarning = 0.1 },  -- the server's options (docs/configuration.md)
--     trusted_folders = { "~/src/my-kernels" },  -- folders whose examples may run (or: vmem-lsp trust DIR)
--   })
--
-- vmem-lsp compiles a file's `# vmem:` examples, which runs that folder's code, only in a trusted
-- folder. Trust is yours to give: here in your own config, with `vmem-lsp trust DIR`, or by
-- answering the server's notice. Never put trusted_folders in a project's .nvim.lua.
--
-- Both start from lua/vmem_lsp/client.lua's table. setup() uses vim.lsp.config / vim.lsp.enable on
-- Neovim 0.11+, vim.lsp.start on 0.8-0.10, and vim.lsp.start_client + vim.lsp.buf_attach_client on 0.7.
local client = require("vmem_lsp.client")
local M = {}

local function root_dir(path, markers)
  local dir = vim.fn.fnamemodify(path, ":p:h")
  while dir and dir ~= "/" and dir ~= "" do
    for _, marker in ipairs(markers) do
      if vim.loop.fs_stat(dir .. "/" .. marker) then
        return dir
      end
    end
    dir = vim.fn.fnamemodify(dir, ":h")
  end
  return vim.fn.getcwd()
end

-- setup()'s options (settings flat, trusted_folders) as a client config over client.lua's.
local function config(user)
  user = user or {}
  local mine = {
    cmd = user.cmd,
    filetypes = user.filetypes,
    root_markers = user.root_markers,
    settings = { vmemLsp = user.settings },
    init_options = { trustedFolders = user.trusted_folders },
  }
  return vim.tbl_deep_extend("force", client.config(), mine)
end

function M.setup(user)
  local cfg = config(user)
  if vim.lsp.config and vim.lsp.enable then
    vim.lsp.config("vmem_lsp", cfg)
    vim.lsp.enable("vmem_lsp")
    return
  end
  cfg.name = "vmem-lsp"
  local client_id
  local function attach(args)
    local bufnr = args.buf
    local path = vim.api.nvim_buf_get_name(bufnr)
    local started = vim.tbl_extend("force", cfg, { root_dir = root_dir(path, cfg.root_markers) })
    if vim.lsp.start then
      vim.lsp.start(started, { bufnr = bufnr })
      return
    end
    if not client_id or vim.lsp.client_is_stopped(client_id) then
      client_id = vim.lsp.start_client(started)
    end
    vim.lsp.buf_attach_client(bufnr, client_id)
  end
  vim.api.nvim_create_autocmd("FileType", { pattern = cfg.filetypes, callback = attach })
end

return M
