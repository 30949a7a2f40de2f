"""A new run folder's name (runfolder.new_run_dir) fits the file-name limit, whatever the suite's name."""
from commbench.runfolder import new_run_dir


def test_a_long_cjk_suite_name_fits_the_file_name_limit(tmp_path):
    path = new_run_dir(tmp_path, "测" * 200)
    assert path.is_dir() and len(path.name.encode()) <= 255
    assert path.name.encode().decode() == path.name and path.name.endswith("测")
