-- vmem-lsp for Neovim's built-in LSP client.
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
-- Uses vim.lsp.config / vim.lsp.enable on Neovim 0.11+, vim.lsp.start on 0.8-0.10,
-- and vim.lsp.start_client + vim.lsp.buf_attach_client on 0.7.
local M = {}

local defaults = {
  cmd = { "vmem-lsp", "serve" },
  filetypes = { "python" },
  root_markers = { "pyproject.toml", "setup.py", ".git" },
  settings = {},
  trusted_folders = {},
}

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

-- The client answers workspace/configuration with the "vmemLsp" section.
local function handlers(settings)
  return {
    ["workspace/configuration"] = function(_, params)
      local result = {}
      for _, item in ipairs(params.items or {}) do
        table.insert(result, item.section == "vmemLsp" and settings or vim.NIL)
      end
      return result
    end,
  }
end

local function config(opts)
  return {
    name = "vmem-lsp",
    cmd = opts.cmd,
    -- Trusted folders go in the initialization options only: the server never takes them
    -- from workspace/configuration, which a project's own files can answer.
    init_options = vim.tbl_extend("force", opts.settings,
      { trustedFolders = vim.tbl_map(function(f) return vim.fn.fnamemodify(vim.fn.expand(f), ":p") end,
                                     opts.trusted_folders) }),
    settings = { vmemLsp = opts.settings },
    handlers = handlers(opts.settings),
  }
end

function M.setup(user)
  local opts = vim.tbl_deep_extend("force", defaults, user or {})
  if vim.lsp.config and vim.lsp.enable then
    vim.lsp.config("vmem_lsp", vim.tbl_extend("force", config(opts), {
      filetypes = opts.filetypes, root_markers = opts.root_markers }))
    vim.lsp.enable("vmem_lsp")
    return
  end
  local client_id
  local function attach(args)
    local bufnr = args.buf
    local path = vim.api.nvim_buf_get_name(bufnr)
    local cfg = vim.tbl_extend("force", config(opts), { root_dir = root_dir(path, opts.root_markers) })
    if vim.lsp.start then
      vim.lsp.start(cfg, { bufnr = bufnr })
      return
    end
    if not client_id or vim.lsp.client_is_stopped(client_id) then
      client_id = vim.lsp.start_client(cfg)
    end
    vim.lsp.buf_attach_client(bufnr, client_id)
  end
  vim.api.nvim_create_autocmd("FileType", { pattern = opts.filetypes, callback = attach })
end

return M
