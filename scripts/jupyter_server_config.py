"""Jupyter Server settings of `make lab` (and the browser tests): a notebook opens unmodified.

When JupyterLab opens a notebook, it starts a kernel and writes what that kernel reports about itself into
the notebook's `metadata.language_info`. If that differs from what the file stores, the notebook is marked
modified at once, and closing it asks to save. The course's notebooks store the `language_info` of the
kernel that made their outputs, Python's exact version included ("3.11.7"): on any other Python every
notebook opened "modified". (Checked in headless Chromium: stored = reported opens clean every time; a
different version, or none stored, opens modified.)

This contents manager hands JupyterLab each notebook with `language_info.version` set to this Python's
version, which is the version the kernel will report (`make lab` runs the kernel from the same environment).
Nothing is written to disk until you save.
"""

import platform

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager


class CourseContentsManager(AsyncLargeFileManager):
    async def get(self, path, content=True, type=None, format=None, **kwargs):
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if model.get("type") == "notebook" and model.get("content"):
            info = model["content"].get("metadata", {}).get("language_info")
            if info and info.get("name") == "python" and "version" in info:
                info["version"] = platform.python_version()
        return model


c.ServerApp.contents_manager_class = CourseContentsManager  # noqa: F821 (c: the config object Jupyter provides)
