"""The facades `Workbench` composes, one per domain: `wb.prompts`, `wb.runs`, `wb.audit`..."""
